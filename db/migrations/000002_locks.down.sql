DROP TABLE IF EXISTS repository_lock_events;
DROP FUNCTION IF EXISTS repository_lock_events_append_only();
DROP TABLE IF EXISTS RepositoryLockRepositoryCredential;
DROP TABLE IF EXISTS RepositoryLockApplication;
DROP TABLE IF EXISTS RepositoryLockOwner;
DROP TABLE IF EXISTS repository_credentials;
DROP TABLE IF EXISTS applications;
