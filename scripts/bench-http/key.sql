-- The unique key of one pgbench transaction (make bench-http): client
-- (:client_id + 1) times 10^15 plus a per-client counter, so no two
-- transactions of a run share a key. pgbench is started with -D i=0;
-- a client's variables persist from one transaction to the next.
\set i :i + 1
\set k 1000000000000000 * (:client_id + 1) + :i
