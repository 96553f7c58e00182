-- Console sessions bound to the admin token that opened them (issue 29):
-- token_mac is HMAC-SHA-256, keyed by a digest of the admin token, of the
-- session id. A process running with another admin token computes another
-- MAC and refuses the session, so rotating ADMIN_TOKEN ends every session.
-- The table never holds anything a guess of the token could be checked
-- against without a session id, which it holds only hashed.
--
-- Nullable so that a replica of the previous release can still sign in
-- during a rolling upgrade; a session without a MAC is refused by this
-- release. The sessions opened before are ended here.
DELETE FROM console_sessions;
ALTER TABLE console_sessions ADD COLUMN token_mac bytea;
ALTER TABLE console_sessions ADD CONSTRAINT console_sessions_token_mac_length
    CHECK (token_mac IS NULL OR length(token_mac) = 32);
