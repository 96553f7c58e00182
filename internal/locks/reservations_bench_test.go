package locks_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
)

// BenchmarkAcquireReservations measures what reservations cost a claim
// (docs/benchmarks.md, "Reservations"): locks.Service.Acquire of free URLs,
// 8 clients, on a database whose reservations table is empty and on one
// with 100,000 reservations (half the claims under a reservation of the
// claimant's own, so the ancestor lookup finds a row; half under none).
// Both databases are prepared first; then short phases alternate between
// them in ABBA order (none, 100k, 100k, none, ...), each on fresh keys, so
// that drift in the machine's load falls on both alike. It prints the
// acquires/s of each phase, the totals and the ratio 100k/none (the target
// is 0.9 or better). It runs its workload once, whatever b.N is; targets
// are printed, never asserted.
func BenchmarkAcquireReservations(b *testing.B) {
	const (
		clients      = 8
		perClient    = 500
		rounds       = 6
		reservations = 100000
	)
	ctx := context.Background()
	type side struct {
		name   string
		ls     *locks.Service
		tenant string
		ops    int
		secs   float64
		last   float64 // acquires/s of the last phase
	}
	setup := func(name string, n int) *side {
		db := dbtest.New(b)
		tenant := dbtest.NewTenant(b, db, "bench-res")
		other := dbtest.NewTenant(b, db, "bench-other")
		// Every other reservation is the claimant's (the claims under
		// org<i> for even i hit one), the rest another tenant's on orgs
		// the claims never touch.
		if _, err := db.ExecContext(ctx, `
			INSERT INTO reservations (prefix, cluster_user_id)
			SELECT CASE WHEN i % 2 = 0 THEN 'github.com/org' || i ELSE 'gitlab.example.com/group' || i END,
				CASE WHEN i % 2 = 0 THEN $1::uuid ELSE $2::uuid END
			FROM generate_series(0, $3 - 1) i`, tenant.ID, other.ID, n); err != nil {
			b.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `VACUUM ANALYZE reservations`); err != nil {
			b.Fatal(err)
		}
		return &side{name: name, ls: newLocks(db), tenant: tenant.ID}
	}
	phase := func(s *side, label string) {
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
						u = fmt.Sprintf("https://github.com/org%d/%s-c%d-r%d", (c*perClient+i)%(reservations/2)*2, label, c, i)
					} else {
						u = fmt.Sprintf("https://github.com/free%d/%s-c%d-r%d", i, label, c, i)
					}
					acq, err := s.ls.Acquire(ctx, s.tenant, u)
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
		elapsed := time.Since(start).Seconds()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		if label[0] != 'w' {
			s.ops += clients * perClient
			s.secs += elapsed
		}
		s.last = float64(clients*perClient) / elapsed
		fmt.Printf("BenchmarkAcquireReservations %-5s %-10s %8.0f acquires/s\n", s.name, label, float64(clients*perClient)/elapsed)
	}
	for n := 0; n < b.N; n++ {
		none, full := setup("none", 0), setup("100k", reservations)
		phase(none, fmt.Sprintf("warm%d", n))
		phase(full, fmt.Sprintf("warm%d", n))
		var pairs []float64
		for round := range rounds {
			order := []*side{none, full}
			if round%2 == 1 {
				order = []*side{full, none}
			}
			for _, s := range order {
				phase(s, fmt.Sprintf("r%d-%d", n, round))
			}
			pairs = append(pairs, full.last/none.last)
		}
		sort.Float64s(pairs)
		median := (pairs[len(pairs)/2-1] + pairs[len(pairs)/2]) / 2
		rn, rf := float64(none.ops)/none.secs, float64(full.ops)/full.secs
		fmt.Printf("BenchmarkAcquireReservations none %.0f acquires/s, 100k %.0f acquires/s: ratio 100k/none = %.2f, median of the rounds' ratios %.2f (target >= 0.90)\n",
			rn, rf, rf/rn, median)
		b.ReportMetric(median, "median-round-ratio")
		b.ReportMetric(rn, "acquires/s-none")
		b.ReportMetric(rf, "acquires/s-100k")
		b.ReportMetric(rf/rn, "ratio")
	}
}
