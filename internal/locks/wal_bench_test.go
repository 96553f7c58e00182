package locks_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
)

// walOps is the number of operations each variant of BenchmarkAcquireWAL
// measures (after walWarmup unmeasured ones).
const (
	walOps    = 3000
	walWarmup = 300
)

// BenchmarkAcquireWAL measures what one acquire of a free URL costs Postgres
// in WAL bytes (docs/benchmarks.md, "Where an acquire's time goes"): the
// acquire as shipped (locks.Service.Acquire: the lock row, its
// GC-candidate index entry, its "acquired" event and the join for the
// tenant's name), the same with one index or the foreign key dropped (each
// on its own database), the lock row alone, and the floor of make
// bench-http's phase f, a one-column INSERT ... ON CONFLICT DO NOTHING;
// and the ownership figures' share (migration 000023): the acquire and a
// 16-acquire group-commit statement with and without their triggers
// (per acquire).
// WAL bytes are deterministic where CPU time is not; pg_current_wal_lsn is
// server-wide, so run it on a quiet server. Reported as WAL-bytes/op (per acquire).
func BenchmarkAcquireWAL(b *testing.B) {
	acquire := func(ctx context.Context, _ *database.DB, ls *locks.Service, tenant string, i int) error {
		_, err := ls.Acquire(ctx, tenant, fmt.Sprintf("github.com/bench-wal/r%d", i))
		return err
	}
	// A group-commit batch of 16 acquires: one statement (the shape of
	// the batcher's statement under load).
	batch16 := func(ctx context.Context, db *database.DB, _ *locks.Service, tenant string, i int) error {
		keys := make([]string, 16)
		for k := range keys {
			keys[k] = fmt.Sprintf("github.com/bench-wal/r%d-%d", i, k)
		}
		_, err := locks.InsertLocks(ctx, db, tenant, "2", keys)
		return err
	}
	const noFigures = `ALTER TABLE RepositoryLockOwner DISABLE TRIGGER repositorylockowner_ownership_insert,
		DISABLE TRIGGER repositorylockowner_ownership_delete, DISABLE TRIGGER repositorylockowner_ownership_update`
	for _, v := range []struct {
		name  string
		setup string
		op    func(ctx context.Context, db *database.DB, ls *locks.Service, tenant string, i int) error
		// acquires is the number of acquires one op makes (1 when 0).
		acquires int
	}{
		{"acquire", "", acquire, 0},
		// The ownership figures' triggers (migration 000023): one delta
		// row per statement and tenant.
		{"acquire_without_ownership_figures", noFigures, acquire, 0},
		{"batch16_acquire", "", batch16, 16},
		{"batch16_acquire_without_ownership_figures", noFigures, batch16, 16},
		// The index migration 000012 replaced with a partial one on
		// denials: what it cost every acquire.
		{"acquire_with_events_event_created_at_idx", `CREATE INDEX ON repository_lock_events (event, created_at)`, acquire, 0},
		{"acquire_without_events_url_idx", `DROP INDEX repository_lock_events_url_idx`, acquire, 0},
		{"acquire_without_events_created_at_idx", `DROP INDEX repository_lock_events_created_at_idx`, acquire, 0},
		{"acquire_without_locks_tenant_idx", `DROP INDEX repositorylockowner_cluster_user_id_idx`, acquire, 0},
		{"acquire_without_tenant_fkey", `ALTER TABLE RepositoryLockOwner DROP CONSTRAINT repositorylockowner_cluster_user_id_fkey`, acquire, 0},
		{"lock_row_alone", "", func(ctx context.Context, db *database.DB, _ *locks.Service, tenant string, i int) error {
			_, err := db.ExecContext(ctx, `
				INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
				VALUES ($1, 2, $2) ON CONFLICT (git_repository_url) DO NOTHING`, fmt.Sprintf("github.com/bench-wal/r%d", i), tenant)
			return err
		}, 0},
		{"floor_raw_insert", `CREATE TABLE bench_raw (k text PRIMARY KEY)`, func(ctx context.Context, db *database.DB, _ *locks.Service, _ string, i int) error {
			_, err := db.ExecContext(ctx, `INSERT INTO bench_raw (k) VALUES ($1) ON CONFLICT DO NOTHING`, fmt.Sprintf("%d", 1000000000000000+i))
			return err
		}, 0},
	} {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			// One connection, without waiting for each commit's flush:
			// the WAL written is the same, the run is faster.
			db := dbtest.New(b, dbtest.Pool(database.PoolConfig{MaxOpenConns: 1}))
			ls := newLocks(db)
			if _, err := db.ExecContext(ctx, `SET synchronous_commit = off`); err != nil {
				b.Fatal(err)
			}
			if v.setup != "" {
				if _, err := db.ExecContext(ctx, v.setup); err != nil {
					b.Fatal(err)
				}
			}
			tenant := dbtest.NewTenant(b, db, "").ID
			n := 0
			for range walWarmup {
				if err := v.op(ctx, db, ls, tenant, n); err != nil {
					b.Fatal(err)
				}
				n++
			}
			var bytes, ops float64
			for b.Loop() {
				var before, after string
				if err := db.GetContext(ctx, &before, `SELECT pg_current_wal_lsn()::text`); err != nil {
					b.Fatal(err)
				}
				for range walOps {
					if err := v.op(ctx, db, ls, tenant, n); err != nil {
						b.Fatal(err)
					}
					n++
				}
				if err := db.GetContext(ctx, &after, `SELECT pg_current_wal_lsn()::text`); err != nil {
					b.Fatal(err)
				}
				var d float64
				if err := db.GetContext(ctx, &d, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)`, after, before); err != nil {
					b.Fatal(err)
				}
				bytes += d
				ops += walOps * float64(max(v.acquires, 1))
			}
			b.ReportMetric(bytes/ops, "WAL-bytes/op")
		})
	}
}

// BenchmarkInsertLocksBatch measures what group commit is for
// (docs/benchmarks.md, "Group commit"): the bare acquire's insert
// statement with 1, 4, 16 and 64 acquires per statement, 8 clients each
// sending such statements back to back on their own database, 24,000
// acquires in all. Reported as acquires/s and statements/s.
func BenchmarkInsertLocksBatch(b *testing.B) {
	const clients, total = 8, 24000
	for _, size := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("per_statement_%d", size), func(b *testing.B) {
			ctx := context.Background()
			db := dbtest.New(b)
			tenant := dbtest.NewTenant(b, db, "bench").ID
			perClient := total / clients / size
			for n := 0; n < b.N; n++ {
				var wg sync.WaitGroup
				errs := make(chan error, clients)
				start := time.Now()
				for c := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						keys := make([]string, size)
						for s := range perClient {
							for i := range keys {
								keys[i] = fmt.Sprintf("github.com/bench-batch/n%d-c%d-s%d-k%d", n, c, s, i)
							}
							if _, err := locks.InsertLocks(ctx, db, tenant, "2", keys); err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				close(errs)
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
				statements := clients * perClient
				b.ReportMetric(float64(statements*size)/elapsed.Seconds(), "acquires/s")
				b.ReportMetric(float64(statements)/elapsed.Seconds(), "statements/s")
			}
		})
	}
}

// BenchmarkAcquireHotTenant is the hot-row check of the ownership figures
// (issue 28) below the HTTP layer: ONE tenant acquires fresh URLs from 32
// goroutines through locks.Service.Acquire (the group-commit path api serve
// uses: one statement, hence one delta row, per batch) on a 32-connection
// pool, in alternating phases with the figures' triggers enabled and
// disabled on one database, 3 s per phase, 3 pairs. Reports acquires/s of
// both and their ratio; tests/ BenchmarkOwnershipFiguresHotTenant does the
// same through the binary.
func BenchmarkAcquireHotTenant(b *testing.B) {
	const conns, rounds, phase = 32, 3, 3 * time.Second
	for range b.N {
		ctx := context.Background()
		db := dbtest.New(b, dbtest.Pool(database.PoolConfig{MaxOpenConns: conns}))
		ls := newLocks(db)
		tenant := dbtest.NewTenant(b, db, "hot").ID
		set := func(verb string) {
			if _, err := db.ExecContext(ctx, `ALTER TABLE RepositoryLockOwner `+verb+` TRIGGER repositorylockowner_ownership_insert`); err != nil {
				b.Fatal(err)
			}
		}
		var seq atomic.Int64
		run := func(d time.Duration) float64 {
			var n atomic.Int64
			rctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			var wg sync.WaitGroup
			start := time.Now()
			for range conns {
				wg.Go(func() {
					for rctx.Err() == nil {
						if _, err := ls.Acquire(ctx, tenant, fmt.Sprintf("github.com/bench-hot/r%d", seq.Add(1))); err != nil {
							b.Error(err)
							return
						}
						n.Add(1)
					}
				})
			}
			wg.Wait()
			return float64(n.Load()) / time.Since(start).Seconds()
		}
		run(time.Second)
		var with, without float64
		for r := range rounds {
			for _, on := range map[bool][]bool{false: {true, false}, true: {false, true}}[r%2 == 1] {
				if on {
					set("ENABLE")
					with += run(phase) / rounds
				} else {
					set("DISABLE")
					without += run(phase) / rounds
				}
			}
		}
		set("ENABLE")
		b.ReportMetric(with, "with_acquires/s")
		b.ReportMetric(without, "without_acquires/s")
		b.ReportMetric(with/without, "ratio")
		if avg, err := os.ReadFile("/proc/loadavg"); err == nil {
			b.Logf("load average after: %s", strings.TrimSpace(string(avg)))
		}
	}
}
