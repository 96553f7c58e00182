package tests

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
)

// figuresTriggers are the ownership figures' triggers on the lock table
// (migration 000023): the only ones an acquire fires.
var figuresTriggers = []string{
	"repositorylockowner_ownership_insert",
	"repositorylockowner_ownership_delete",
	"repositorylockowner_ownership_update",
}

// BenchmarkOwnershipFiguresHotTenant is issue 28's hot-row check, through
// the binary (make bench): ONE tenant acquires fresh URLs from 32
// connections (rate limit and pool share off, so the tenant may use the
// whole pool), on one server and database, in alternating phases with the
// figures' triggers enabled and disabled (ALTER TABLE ... DISABLE TRIGGER
// between phases), so both see the same load; FIGURES_BENCH_PHASE (default
// 4s) per phase, FIGURES_BENCH_ROUNDS (default 3) pairs. Prints acquires/s
// of both, their ratio and the load average before and after.
func BenchmarkOwnershipFiguresHotTenant(b *testing.B) {
	phase := 4 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FIGURES_BENCH_PHASE")); err == nil && d > 0 {
		phase = d
	}
	rounds := 3
	if n, err := fmt.Sscan(os.Getenv("FIGURES_BENCH_ROUNDS"), &rounds); n != 1 || err != nil || rounds < 1 {
		rounds = 3
	}
	const conns = 32
	for range b.N {
		s := startServerWith(b, serverOptions{Env: []string{"RATE_LIMIT=0", "TENANT_POOL_SHARE=0", "LOG_LEVEL=warn"}})
		token := s.createTenant(b, "hot")
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
		c := client.New(s.URL, client.WithToken(token), client.WithHTTPClient(hc), client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))
		db, err := sql.Open("postgres", s.DatabaseURL)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		setTriggers := func(enable bool) {
			verb := "DISABLE"
			if enable {
				verb = "ENABLE"
			}
			stmts := make([]string, len(figuresTriggers))
			for i, tr := range figuresTriggers {
				stmts[i] = verb + " TRIGGER " + tr
			}
			if _, err := db.Exec(`ALTER TABLE RepositoryLockOwner ` + strings.Join(stmts, ", ")); err != nil {
				b.Fatal(err)
			}
		}
		var seq atomic.Int64
		run := func(d time.Duration) (float64, int64) {
			var ok, failed atomic.Int64
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			var wg sync.WaitGroup
			start := time.Now()
			for range conns {
				wg.Go(func() {
					for ctx.Err() == nil {
						_, err := c.AcquireLock(context.Background(), fmt.Sprintf("https://git.example.com/hot/r%d", seq.Add(1)))
						if err != nil {
							failed.Add(1)
							continue
						}
						ok.Add(1)
					}
				})
			}
			wg.Wait()
			return float64(ok.Load()) / time.Since(start).Seconds(), failed.Load()
		}
		run(phase / 2) // warm up: connections, prepared plans
		load0 := loadAvg()
		var with, without float64
		var failures int64
		for r := range rounds {
			// Alternate which goes first, so a trend in the load
			// favours neither.
			order := []bool{true, false}
			if r%2 == 1 {
				order = []bool{false, true}
			}
			for _, enabled := range order {
				setTriggers(enabled)
				rate, f := run(phase)
				failures += f
				if enabled {
					with += rate / float64(rounds)
				} else {
					without += rate / float64(rounds)
				}
				b.Logf("round %d, figures %-8s %8.0f acquires/s (load %s)", r, map[bool]string{true: "on", false: "off"}[enabled], rate, loadAvg())
			}
		}
		setTriggers(true)
		b.Logf("one tenant, %d connections, through the binary: with the figures %.0f acquires/s, without %.0f, ratio %.3f; load average before %s, after %s",
			conns, with, without, with/without, load0, loadAvg())
		b.ReportMetric(with, "with_acquires/s")
		b.ReportMetric(without, "without_acquires/s")
		b.ReportMetric(with/without, "ratio")
		b.ReportMetric(float64(failures), "failures")
	}
}

// loadAvg is /proc/loadavg's first three fields ("?" where there is none).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
