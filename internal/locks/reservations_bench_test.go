package locks_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
)

// BenchmarkAcquireReservations measures what reservations cost a claim
// (docs/benchmarks.md, "Reservations"): locks.Service.Acquire of free URLs,
// 8 clients, with the reservations table empty and with 100,000
// reservations in it (half the claims under a reservation of the
// claimant's own, so the ancestor lookup finds a row; half under none).
// The phases alternate twice (none, 100k, none, 100k) on one database,
// each on fresh keys, and it prints acquires/s of each and the ratio
// 100k/none (the target is 0.9 or better). It runs its workload once,
// whatever b.N is; targets are printed, never asserted.
func BenchmarkAcquireReservations(b *testing.B) {
	const (
		clients      = 8
		perClient    = 1000
		reservations = 100000
	)
	ctx := context.Background()
	db := dbtest.New(b)
	ls := newLocks(db)
	tenant := dbtest.NewTenant(b, db, "bench-res")
	other := dbtest.NewTenant(b, db, "bench-other")
	fill := func() {
		// Every other reservation is the claimant's (the claims under
		// org<i> for even i hit one), the rest another tenant's on orgs
		// the claims never touch.
		if _, err := db.ExecContext(ctx, `
			INSERT INTO reservations (prefix, cluster_user_id)
			SELECT CASE WHEN i % 2 = 0 THEN 'github.com/org' || i ELSE 'gitlab.example.com/group' || i END,
				CASE WHEN i % 2 = 0 THEN $1::uuid ELSE $2::uuid END
			FROM generate_series(0, $3 - 1) i`, tenant.ID, other.ID, reservations); err != nil {
			b.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `ANALYZE reservations`); err != nil {
			b.Fatal(err)
		}
	}
	empty := func() {
		if _, err := db.ExecContext(ctx, `TRUNCATE reservations`); err != nil {
			b.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `ANALYZE reservations`); err != nil {
			b.Fatal(err)
		}
	}
	phase := func(name string) float64 {
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		start := time.Now()
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perClient {
					var u string
					if i%2 == 0 {
						u = fmt.Sprintf("https://github.com/org%d/%s-c%d-r%d", (c*perClient+i)%(reservations/2)*2, name, c, i)
					} else {
						u = fmt.Sprintf("https://github.com/free%d/%s-c%d-r%d", i, name, c, i)
					}
					acq, err := ls.Acquire(ctx, tenant.ID, u)
					if err == nil && !acq.Acquired {
						err = fmt.Errorf("%s not acquired: %+v", u, acq)
					}
					if err != nil {
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
		rate := float64(clients*perClient) / elapsed.Seconds()
		fmt.Printf("BenchmarkAcquireReservations %-12s %8.0f acquires/s\n", name, rate)
		return rate
	}
	for n := 0; n < b.N; n++ {
		empty()
		phase(fmt.Sprintf("warmup%d", n))
		var none, full float64
		for round := range 2 {
			empty()
			none += phase(fmt.Sprintf("none%d-%d", n, round))
			fill()
			full += phase(fmt.Sprintf("100k%d-%d", n, round))
		}
		fmt.Printf("BenchmarkAcquireReservations ratio 100k/none = %.2f (target >= 0.90)\n", full/none)
		b.ReportMetric(none/2, "acquires/s-none")
		b.ReportMetric(full/2, "acquires/s-100k")
		b.ReportMetric(full/none, "ratio")
	}
}
