package apps_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

// walCreateOps is the number of operations each variant of
// BenchmarkCreateWAL measures (after walCreateWarmup unmeasured ones).
const (
	walCreateOps    = 1000
	walCreateWarmup = 100
)

// BenchmarkCreateWAL measures what Postgres writes to its WAL for one
// operation on Applications (docs/benchmarks.md, "WAL per create"): a
// create on a new URL (the fast path: lock, event, row and reference in one
// statement), a create that joins the tenant's lock on a URL it already
// holds (the transaction path), a delete that leaves the lock referenced,
// a delete that releases it, and the floor of make bench-http, a
// one-column INSERT ... ON CONFLICT DO NOTHING. WAL bytes are
// deterministic where CPU time is not; pg_current_wal_lsn is server-wide,
// so run it on a quiet server (or compare the figures of one run).
// Reported as WAL-bytes/op.
func BenchmarkCreateWAL(b *testing.B) {
	type state struct {
		tenant string
		ids    []string // applications made by the setup, one per op
	}
	create := func(ctx context.Context, svc *apps.Service, tenant string, i int, url string) (string, error) {
		a, err := svc.CreateApplication(ctx, tenant, apps.NewApplication{
			Name: fmt.Sprintf("app-%d", i), RepoURL: url, Path: "deploy", TargetRevision: "main"})
		return a.ID, err
	}
	for _, v := range []struct {
		name string
		// prepare runs before op i, unmeasured; op is measured.
		prepare func(ctx context.Context, svc *apps.Service, st *state, i int) error
		op      func(ctx context.Context, db *database.DB, svc *apps.Service, st *state, i int) error
	}{
		{"create_new_lock", nil, func(ctx context.Context, _ *database.DB, svc *apps.Service, st *state, i int) error {
			_, err := create(ctx, svc, st.tenant, i, fmt.Sprintf("https://github.com/bench-wal/r%d", i))
			return err
		}},
		{"create_joining_lock", func(ctx context.Context, svc *apps.Service, st *state, i int) error {
			_, err := create(ctx, svc, st.tenant, 1000000+i, fmt.Sprintf("https://github.com/bench-wal/r%d", i))
			return err
		}, func(ctx context.Context, _ *database.DB, svc *apps.Service, st *state, i int) error {
			_, err := create(ctx, svc, st.tenant, i, fmt.Sprintf("https://github.com/bench-wal/r%d", i))
			return err
		}},
		{"delete_keeping_lock", func(ctx context.Context, svc *apps.Service, st *state, i int) error {
			if _, err := create(ctx, svc, st.tenant, 1000000+i, fmt.Sprintf("https://github.com/bench-wal/r%d", i)); err != nil {
				return err
			}
			id, err := create(ctx, svc, st.tenant, i, fmt.Sprintf("https://github.com/bench-wal/r%d", i))
			st.ids = append(st.ids, id)
			return err
		}, func(ctx context.Context, _ *database.DB, svc *apps.Service, st *state, i int) error {
			return svc.DeleteApplication(ctx, st.tenant, st.ids[len(st.ids)-1])
		}},
		{"delete_releasing_lock", func(ctx context.Context, svc *apps.Service, st *state, i int) error {
			id, err := create(ctx, svc, st.tenant, i, fmt.Sprintf("https://github.com/bench-wal/r%d", i))
			st.ids = append(st.ids, id)
			return err
		}, func(ctx context.Context, _ *database.DB, svc *apps.Service, st *state, i int) error {
			return svc.DeleteApplication(ctx, st.tenant, st.ids[len(st.ids)-1])
		}},
		{"floor_raw_insert", nil, func(ctx context.Context, db *database.DB, _ *apps.Service, _ *state, i int) error {
			_, err := db.ExecContext(ctx, `INSERT INTO bench_raw (k) VALUES ($1) ON CONFLICT DO NOTHING`, fmt.Sprintf("%d", 1000000000000000+i))
			return err
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			// One connection, without waiting for each commit's flush:
			// the WAL written is the same, the run is faster. (So the
			// position read is the insert position, not the written one,
			// which lags.)
			db := dbtest.New(b, dbtest.Pool(database.PoolConfig{MaxOpenConns: 1}))
			svc, _ := newApps(db)
			if _, err := db.ExecContext(ctx, `SET synchronous_commit = off; CREATE TABLE bench_raw (k text PRIMARY KEY)`); err != nil {
				b.Fatal(err)
			}
			st := &state{tenant: dbtest.NewTenant(b, db, "").ID}
			n := 0
			step := func(measure func(func() error) error) {
				if v.prepare != nil {
					if err := v.prepare(ctx, svc, st, n); err != nil {
						b.Fatal(err)
					}
				}
				if err := measure(func() error { return v.op(ctx, db, svc, st, n) }); err != nil {
					b.Fatal(err)
				}
				n++
			}
			lsn := func() string {
				var l string
				if err := db.GetContext(ctx, &l, `SELECT pg_current_wal_insert_lsn()::text`); err != nil {
					b.Fatal(err)
				}
				return l
			}
			for range walCreateWarmup {
				step(func(op func() error) error { return op() })
			}
			var bytes, ops float64
			for b.Loop() {
				for range walCreateOps {
					// Only the op is measured: the WAL position is read
					// around it (each read writes no WAL).
					step(func(op func() error) error {
						before := lsn()
						if err := op(); err != nil {
							return err
						}
						after := lsn()
						var d float64
						if err := db.GetContext(ctx, &d, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)`, after, before); err != nil {
							return err
						}
						bytes += d
						return nil
					})
					ops++
				}
			}
			b.ReportMetric(bytes/ops, "WAL-bytes/op")
		})
	}
}
