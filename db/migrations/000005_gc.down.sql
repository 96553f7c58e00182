-- Dropping the views removes their grants to repolock_reporting in this
-- database. The role itself is cluster-wide and other databases of the
-- cluster may still use it, so it is never dropped here (docs/reporting.md
-- says how to drop it once no database needs it).
DROP VIEW IF EXISTS report_gc_runs;
DROP VIEW IF EXISTS report_denials;
DROP VIEW IF EXISTS report_orphan_locks;
DROP VIEW IF EXISTS report_locks;
DROP VIEW IF EXISTS report_ownership;
DROP TABLE IF EXISTS gc_leases;
DROP TABLE IF EXISTS gc_runs;
