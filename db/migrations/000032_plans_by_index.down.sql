ALTER FUNCTION repolock_lease_acquire(uuid, text, text, bigint, boolean) RESET enable_seqscan;
ALTER FUNCTION repolock_ownership_locks() RESET enable_seqscan;
ALTER FUNCTION repolock_flag_gc_candidates() RESET enable_seqscan;
