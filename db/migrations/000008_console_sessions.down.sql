DROP TABLE IF EXISTS console_sessions;
