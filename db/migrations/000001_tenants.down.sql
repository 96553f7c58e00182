DROP TABLE IF EXISTS api_tokens;
DROP TABLE IF EXISTS cluster_users;
