//go:build watchbench

package tests

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/lib/pq"

	"github.com/repolock/repolock/internal/dbtest"
)

// BenchmarkWatch (make bench-watch): the binary at its defaults (GC off),
// 100 tenants. Phase 1: acquires paced at WATCH_RATE (500/s) for
// WATCH_DURATION (20s), no watchers. Phase 2: WATCH_WATCHERS (1,000) SSE
// watchers spread over the tenants (10 each), then the same acquires.
// Printed: the acquire rate of both phases and their ratio (target
// >= 0.9), the p50/p99 from an acquire's 2xx to its event at each of its
// tenant's watchers (target p99 <= 1 s), the binary's peak resident memory
// (target <= 150 MiB) and the peak of the database's Postgres sessions
// against the pool size (target <= pool + 1). Targets are printed, not
// asserted. WATCH_GOMEMLIMIT (e.g. 120MiB) runs the binary with GOMEMLIMIT.
func BenchmarkWatch(b *testing.B) {
	rate := envInt("WATCH_RATE", 500)
	watchers := envInt("WATCH_WATCHERS", 1000)
	tenants := envInt("WATCH_TENANTS", 100)
	dur, err := time.ParseDuration(envStr("WATCH_DURATION", "20s"))
	if err != nil {
		b.Fatal(err)
	}
	env := []string{"GC_INTERVAL=0"}
	if v := os.Getenv("WATCH_GOMEMLIMIT"); v != "" {
		env = append(env, "GOMEMLIMIT="+v) // the runtime's soft memory limit, for a comparison run
	}
	s := startServerWith(b, serverOptions{Env: env, Args: []string{"--log-level", "info"}})
	ctx := context.Background()
	tokens := make([]string, tenants)
	for i := range tokens {
		tokens[i] = s.createTenant(b, fmt.Sprintf("t%03d", i))
	}
	admin, err := sql.Open("postgres", dbtest.AdminURL())
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	dbName := dbNameOf(s.DatabaseURL)
	pool := poolSize(b, s)

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}}
	run := func(phase string, acked *sync.Map) (float64, time.Duration) {
		var ok, failed atomic.Int64
		var lat []time.Duration
		var mu sync.Mutex
		sem := make(chan struct{}, 128)
		var wg sync.WaitGroup
		// Paced by a schedule (request i at start + i/rate), not a ticker
		// that drops ticks: a generator that falls behind catches up.
		start := time.Now()
		total := int(dur.Seconds() * float64(rate))
		for i := 0; i < total; i++ {
			if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
				time.Sleep(d)
			}
			sem <- struct{}{}
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				defer func() { <-sem }()
				u := fmt.Sprintf("github.com/%s/r%d", phase, i)
				body := strings.NewReader(`{"repo_url":"https://` + u + `"}`)
				req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/locks/acquire", body)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tokens[i%tenants])
				t0 := time.Now()
				res, err := hc.Do(req)
				if err != nil {
					if failed.Add(1) <= 3 {
						b.Logf("%s: acquire %d: %v", phase, i, err)
					}
					return
				}
				answer, _ := io.ReadAll(io.LimitReader(res.Body, 512))
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					if failed.Add(1) <= 3 { // say why, for the first few
						b.Logf("%s: acquire %d: %d %s", phase, i, res.StatusCode, answer)
					}
					return
				}
				done := time.Now()
				ok.Add(1)
				if acked != nil {
					acked.Store(u, done)
				}
				mu.Lock()
				lat = append(lat, done.Sub(t0))
				mu.Unlock()
			}(i)
		}
		wg.Wait()
		elapsed := time.Since(start)
		slices.Sort(lat)
		r := float64(ok.Load()) / elapsed.Seconds()
		b.Logf("%s: %d acquires 2xx in %s = %.0f/s (target rate %d/s), %d failed, acquire p50 %s p99 %s",
			phase, ok.Load(), elapsed.Round(time.Millisecond), r, rate, failed.Load(), pct(lat, 50), pct(lat, 99))
		return r, pct(lat, 99)
	}

	// Sampling: the binary's RSS and the database's sessions.
	var peakRSS, peakSessions atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			if r := rssKiB(s.cmd.Process.Pid); r > peakRSS.Load() {
				peakRSS.Store(r)
			}
			var n int64
			if admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, dbName).Scan(&n) == nil && n > peakSessions.Load() {
				peakSessions.Store(n)
			}
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
		}
	}()

	base, _ := run("nowatch", nil)
	baseSessions, baseRSS := peakSessions.Load(), peakRSS.Load()

	// The watchers.
	type arrival struct {
		url string
		at  time.Time
	}
	wctx, cancel := context.WithCancel(ctx)
	arrivals := make([][]arrival, watchers)
	var connected, wg sync.WaitGroup
	connected.Add(watchers)
	sseClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: watchers, MaxConnsPerHost: 0}}
	for w := range watchers {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(wctx, http.MethodGet, s.URL+"/v1/events", nil)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Authorization", "Bearer "+tokens[w%tenants])
			res, err := sseClient.Do(req)
			if err != nil || res.StatusCode != http.StatusOK {
				b.Errorf("watcher %d: %v %v", w, err, res)
				connected.Done()
				return
			}
			defer res.Body.Close()
			r := bufio.NewReader(res.Body)
			first := true
			var ev struct {
				URL string `json:"normalized_url"`
			}
			for {
				line, err := r.ReadSlice('\n')
				if err != nil {
					return
				}
				if first && strings.HasPrefix(string(line), "data: ") {
					first = false
					connected.Done() // the starting bookmark
					continue
				}
				if rest, ok := strings.CutPrefix(string(line), "data: "); ok && strings.Contains(rest, `"normalized_url"`) {
					now := time.Now()
					if json.Unmarshal([]byte(rest), &ev) == nil {
						arrivals[w] = append(arrivals[w], arrival{ev.URL, now})
					}
				}
			}
		}(w)
	}
	connected.Wait()
	b.Logf("%d watchers connected over %d tenants; binary RSS with them idle: %.1f MiB", watchers, tenants, float64(rssKiB(s.cmd.Process.Pid))/1024)

	var acked sync.Map
	with, _ := run("watched", &acked)
	// Let the last events arrive, then stop the watchers.
	time.Sleep(2 * time.Second)
	cancel()
	wg.Wait()
	close(stopSampling)
	<-sampled

	var lat []time.Duration
	missing := 0
	expected := 0
	acked.Range(func(k, v any) bool {
		expected += watchers / tenants
		return true
	})
	for w := range watchers {
		for _, a := range arrivals[w] {
			if t, ok := acked.Load(a.url); ok {
				lat = append(lat, a.at.Sub(t.(time.Time)))
			}
		}
	}
	missing = expected - len(lat)
	slices.Sort(lat)
	p99 := pct(lat, 99)
	ratio := with / base
	rss := float64(peakRSS.Load()) / 1024
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	b.Logf("acquire 2xx → event at its tenant's watchers: %d deliveries (%d expected, %d missing), p50 %s p99 %s (target p99 <= 1s: %s)",
		len(lat), expected, missing, pct(lat, 50), p99, verdict(p99 <= time.Second && missing == 0))
	b.Logf("acquire rate with watchers / without: %.0f / %.0f = %.2f (target >= 0.9: %s)", with, base, ratio, verdict(ratio >= 0.9))
	b.Logf("binary peak RSS: %.1f MiB (%.1f MiB before the watchers; target <= 150 MiB: %s)", rss, float64(baseRSS)/1024, verdict(rss <= 150))
	b.Logf("Postgres sessions of the database, peak: %d (%d before the watchers); pool %d (target <= pool + 1 = %d: %s)",
		peakSessions.Load(), baseSessions, pool, pool+1, verdict(peakSessions.Load() <= int64(pool+1)))
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-event-ms")
	b.ReportMetric(ratio, "rate-ratio")
	b.ReportMetric(rss, "peak-rss-MiB")
	b.ReportMetric(float64(peakSessions.Load()), "pg-sessions")
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := (len(d)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return d[i-1].Round(time.Millisecond)
}

func envStr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(k string, def int) int {
	n, err := strconv.Atoi(envStr(k, strconv.Itoa(def)))
	if err != nil {
		return def
	}
	return n
}

func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

func dbNameOf(url string) string {
	u := url[strings.LastIndex(url, "/")+1:]
	name, _, _ := strings.Cut(u, "?")
	return name
}

// poolSize reads go_sql_max_open_connections from the binary's /metrics.
func poolSize(tb testing.TB, s *server) int {
	res, err := http.Get(s.URL + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	m := regexp.MustCompile(`(?m)^go_sql_max_open_connections(?:\{[^}]*\})? (\d+)`).FindSubmatch(body)
	if m == nil {
		tb.Fatal("no go_sql_max_open_connections in /metrics")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}
