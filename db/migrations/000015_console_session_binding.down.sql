ALTER TABLE console_sessions DROP CONSTRAINT console_sessions_token_mac_length;
ALTER TABLE console_sessions DROP COLUMN token_mac;
