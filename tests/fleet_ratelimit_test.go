package tests

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
	"github.com/repolock/repolock/internal/dbtest"
)

// The per-tenant rate limit is the fleet's (issue 28): three replicas of
// the binary on one database, one tenant hammering GET /v1/me through all
// three for a few seconds. With the fleet heartbeat its 2xx total stays
// within 1.2 times one replica's budget (rate × duration + burst) and
// reaches at least half of it; with the heartbeat off (per-process limits)
// the same load gets more than 1.2 times, which is what the bound is about.
// A replica that stops gives its share back: the others count 2.
func TestFleetRateLimit(t *testing.T) {
	t.Parallel()
	const (
		rate  = 50
		burst = 100
		run   = 4 * time.Second
	)
	budget := func(elapsed time.Duration) float64 { return rate*elapsed.Seconds() + burst }

	start := func(t *testing.T, heartbeat string) []*server {
		dbURL := dbtest.NewDatabase(t, true)
		env := []string{"GC_INTERVAL=0", fmt.Sprintf("RATE_LIMIT=%d", rate), fmt.Sprintf("RATE_BURST=%d", burst), "FLEET_HEARTBEAT=" + heartbeat}
		var replicas []*server
		for range 3 {
			replicas = append(replicas, startServerWith(t, serverOptions{DatabaseURL: dbURL, Env: env}))
		}
		return replicas
	}

	t.Run("fleet", func(t *testing.T) {
		t.Parallel()
		replicas := start(t, "200ms")
		for _, s := range replicas {
			waitFleet(t, s, 3)
		}
		token := replicas[0].createTenant(t, "hammer")
		ok, per, elapsed := hammer(t, replicas, token, run)
		b := budget(elapsed)
		t.Logf("fleet of 3: %d answers 2xx in %v (per replica %v); one replica's budget %.0f; ratio %.2f", ok, elapsed.Round(time.Millisecond), per, b, float64(ok)/b)
		if float64(ok) > 1.2*b {
			t.Errorf("%d answers 2xx: more than 1.2 × the budget %.0f", ok, b)
		}
		if float64(ok) < 0.5*b {
			t.Errorf("%d answers 2xx: less than half the budget %.0f", ok, b)
		}

		db, err := sql.Open("postgres", replicas[0].DatabaseURL)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rows := func() int {
			var n int
			if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM fleet_replicas`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}

		// A replica that dies (SIGKILL: its row stays) gives its share
		// back: the others count two.
		replicas[2].kill(t)
		waitFleet(t, replicas[0], 2)
		waitFleet(t, replicas[1], 2)
		if n := rows(); n != 3 {
			t.Fatalf("heartbeat rows after a replica died: %d, want 3 (a dead replica's row is deleted only after a minute)", n)
		}
		// One that stops cleanly deletes its row.
		replicas[1].stop(t)
		if n := rows(); n != 2 {
			t.Fatalf("heartbeat rows after a replica stopped cleanly: %d, want 2", n)
		}
		waitFleet(t, replicas[0], 1)
	})

	t.Run("per-process", func(t *testing.T) {
		t.Parallel()
		replicas := start(t, "0")
		token := replicas[0].createTenant(t, "hammer")
		ok, per, elapsed := hammer(t, replicas, token, run)
		b := budget(elapsed)
		t.Logf("heartbeat off: %d answers 2xx in %v (per replica %v); one replica's budget %.0f; ratio %.2f", ok, elapsed.Round(time.Millisecond), per, b, float64(ok)/b)
		if float64(ok) <= 1.2*b {
			t.Errorf("heartbeat off: %d answers 2xx, within 1.2 × the budget %.0f: the load does not tell a fleet-wide limit from per-process ones", ok, b)
		}
	})
}

// waitFleet waits until s's repolock_fleet_replicas is want.
func waitFleet(t *testing.T, s *server, want int) {
	t.Helper()
	line := fmt.Sprintf("\nrepolock_fleet_replicas %d\n", want)
	deadline := time.Now().Add(time.Minute)
	for {
		status, _, raw := s.doRaw(t, http.MethodGet, "/metrics", "", nil, nil)
		if status == http.StatusOK && strings.Contains(string(raw), line) {
			return
		}
		if time.Now().After(deadline) {
			i := strings.Index(string(raw), "repolock_fleet_replicas ")
			t.Fatalf("%s: repolock_fleet_replicas is not %d after a minute (status %d, %q)", s.URL, want, status, string(raw)[max(i, 0):min(max(i, 0)+40, len(raw))])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hammer sends GET /v1/me as token through every replica in turn, from
// several workers, for d; it returns the 2xx answers, their split per
// replica and the time from the first request to the last answer. Every
// answer but 200 and 429 fails the test.
func hammer(t *testing.T, replicas []*server, token string, d time.Duration) (int, []int, time.Duration) {
	t.Helper()
	const workers = 6
	clients := make([]*client.Client, len(replicas))
	for i, s := range replicas {
		clients[i] = s.client(t, token)
	}
	var (
		mu      sync.Mutex
		per     = make([]int, len(replicas))
		refused int
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	begin := time.Now()
	stop := begin.Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(stop); i++ {
				r := i % len(replicas)
				_, err := clients[r].Me(ctx)
				var ce *client.Error
				switch {
				case err == nil:
					mu.Lock()
					per[r]++
					mu.Unlock()
				case errors.As(err, &ce) && ce.StatusCode == http.StatusTooManyRequests:
					mu.Lock()
					refused++
					mu.Unlock()
				default:
					t.Errorf("GET /v1/me on replica %d: %v", r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	ok := 0
	for _, n := range per {
		ok += n
	}
	t.Logf("%d answers 429", refused)
	return ok, per, elapsed
}
