-- f: the floor. One raw one-column INSERT ... ON CONFLICT DO NOTHING per
-- transaction into a scratch table (bench_raw, created by bench-http.sh),
-- a unique key each time. Appended to key.sql by bench-http.sh.
INSERT INTO bench_raw (k) VALUES (:k) ON CONFLICT DO NOTHING;
