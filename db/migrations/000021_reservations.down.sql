DROP VIEW IF EXISTS report_reservations;
ALTER TABLE repository_lock_events DROP COLUMN reserved_prefix, DROP COLUMN reason;
DROP TABLE reservations;
