-- The PL/pgSQL functions on hot paths find their rows through an index,
-- whatever plan their session cached (issues 27 and 28; docs/benchmarks.md,
-- "Plans cached on a small table").
--
-- The reference and lock triggers find the locks they change by id, never
-- by reading RepositoryLockOwner whole.
--
-- repolock_flag_gc_candidates (000023: the locks a statement's references
-- gained or lost, `id = ANY (gained)`) and repolock_ownership_locks (the
-- new locks a statement left unreferenced, a join of the transition table
-- on id) are PL/pgSQL: each statement's plan is cached for the life of the
-- session, and after five runs it may be a generic plan made without the
-- arrays' sizes. Planned while RepositoryLockOwner was a few pages (a new
-- deployment, or make bench-http's fresh database), that plan read the
-- whole table, and kept reading it as the table grew, until an ANALYZE
-- invalidated it (never, with autovacuum off; after 10% of the table
-- changed, with it on). make bench-http's phase a (POST /v1/applications)
-- measured 2,213 sequential scans reading 22.6M rows of
-- RepositoryLockOwner in 10 s, one per batch of creates: Postgres spent
-- 420 µs per create against 155 in earlier runs, and the CPUs sat idle a
-- third of the time behind the batches in flight.
--
-- A lock is always found by its id here: a sequential scan is never the
-- right plan. SET enable_seqscan = off applies to the function's own
-- statements only, and the plans it caches are made under it. The
-- TRUNCATE branch of repolock_flag_gc_candidates still reads the table
-- whole (it has no ids), through an index instead; TRUNCATE is a test's
-- reset, not a service path.
ALTER FUNCTION repolock_flag_gc_candidates() SET enable_seqscan = off;
ALTER FUNCTION repolock_ownership_locks() SET enable_seqscan = off;

-- repolock_lease_acquire (000030) reads a key's live lease by (tenant,
-- key): its cached generic plan, made while leases held a page or two
-- (bench-http's phase l: 100 live leases), was a sequential scan, kept as
-- the table filled with the dead rows of released leases. Phase l
-- measured 18,086 scans reading 2.1M rows in 15 s, and Postgres spent 312
-- µs per lease pair against 132 with 10,000 live leases (phase L), whose
-- plans use the index. 000031 did the same for the release and keepalive
-- batches.
ALTER FUNCTION repolock_lease_acquire(uuid, text, text, bigint, boolean) SET enable_seqscan = off;
