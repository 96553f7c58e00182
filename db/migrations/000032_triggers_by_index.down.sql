ALTER FUNCTION repolock_ownership_locks() RESET enable_seqscan;
ALTER FUNCTION repolock_flag_gc_candidates() RESET enable_seqscan;
