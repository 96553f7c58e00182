//go:build ha

package tests

import (
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"
)

// What a synchronous standby costs: the create-application rate through the
// binary against a primary whose commits wait for nothing
// (synchronous_standby_names = ”), for the standby to flush the WAL
// (synchronous_commit = on) and to apply it (remote_apply). The same cluster,
// process and workload; only the primary's setting changes between runs
// (ALTER SYSTEM + pg_reload_conf). Run with make bench-scale, or:
//
//	go test -tags ha -run '^$' -bench HASynchronousCommit -benchtime 1x ./tests/
func BenchmarkHASynchronousCommit(b *testing.B) {
	c := newHACluster(b)
	admin := c.primary.open(b, "postgres")
	defer admin.Close()
	if _, err := admin.Exec(`CREATE DATABASE repolock`); err != nil {
		b.Fatal(err)
	}
	s := startServerWith(b, serverOptions{DatabaseURL: c.primary.url("repolock"), Env: []string{"GC_INTERVAL=0", "RATE_LIMIT=0"}})
	tokens := make([]string, 8)
	for i := range tokens {
		tokens[i] = s.createTenant(b, fmt.Sprintf("bench-%d", i))
	}
	type config struct{ key, name, names, commit string }
	var (
		local  = config{"local", "no synchronous standby", "", "on"}
		flush  = config{"flush", "synchronous_commit=on (standby flushed)", "standby1", "on"}
		apply  = config{"apply", "synchronous_commit=remote_apply", "standby1", "remote_apply"}
		warmup = config{"warmup", "warm-up", "", "on"}
	)
	// Each setting twice, interleaved, after a warm-up round that is not
	// reported: the figures of one setting are the two rounds together.
	configs := []config{warmup, local, flush, apply, local, flush, apply}
	type result struct {
		lats    []time.Duration
		elapsed time.Duration
	}
	results := map[string]*result{}
	const perClient = 150
	for round, cfg := range configs {
		for _, q := range []string{
			fmt.Sprintf(`ALTER SYSTEM SET synchronous_standby_names = '%s'`, cfg.names),
			fmt.Sprintf(`ALTER SYSTEM SET synchronous_commit = '%s'`, cfg.commit),
			`SELECT pg_reload_conf()`,
		} {
			if _, err := admin.Exec(q); err != nil {
				b.Fatal(err)
			}
		}
		want := cfg.names
		c.waitFor(c.primary, fmt.Sprintf(`SELECT current_setting('synchronous_standby_names') = '%s' AND current_setting('synchronous_commit') = '%s'`, want, cfg.commit), 30*time.Second)
		var (
			mu   sync.Mutex
			lats []time.Duration
			wg   sync.WaitGroup
		)
		start := time.Now()
		for ci, token := range tokens {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perClient {
					t0 := time.Now()
					status, raw := postJSON(b, s, "/v1/applications", token, map[string]any{
						"name": fmt.Sprintf("r%d-%d", round, i), "repo_url": fmt.Sprintf("https://github.com/bench/c%d-r%d-%d", ci, round, i)})
					d := time.Since(t0)
					if status != http.StatusCreated {
						b.Errorf("create: %d %s", status, raw)
						return
					}
					mu.Lock()
					lats = append(lats, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		r := results[cfg.name]
		if r == nil {
			r = &result{}
			results[cfg.name] = r
		}
		r.elapsed += time.Since(start)
		r.lats = append(r.lats, lats...)
	}
	var base float64
	for _, cfg := range []config{local, flush, apply} {
		r := results[cfg.name]
		sort.Slice(r.lats, func(i, j int) bool { return r.lats[i] < r.lats[j] })
		rate := float64(len(r.lats)) / r.elapsed.Seconds()
		if cfg == local {
			base = rate
		}
		b.Logf("%-40s %5d creates by %d clients: %6.0f/s (%.2fx), p50 %s, p99 %s",
			cfg.name, len(r.lats), len(tokens), rate, rate/base, r.lats[len(r.lats)/2].Round(10*time.Microsecond), r.lats[len(r.lats)*99/100].Round(10*time.Microsecond))
		b.ReportMetric(rate, "creates/s_"+cfg.key)
	}
}
