//go:build ha

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/client"
	"github.com/repolock/repolock/internal/database"
)

// Failover under load (make test-ha): a primary and a synchronous streaming
// standby; `repolock serve` with DATABASE_URL listing both hosts and
// target_session_attrs=read-write; a create/delete workload through it. The
// primary is stopped the way a crash would stop it and the standby is
// promoted in the middle of the load. Requests succeed again within 10 s,
// every acknowledged write is on the new primary, no repository has two
// owners, and the requests that failed during the switch answered 503.
func TestHAFailover(t *testing.T) {
	fail := newFailureRecap(t)
	c := newHACluster(t)
	admin := c.primary.open(t, "postgres")
	if _, err := admin.Exec(`CREATE DATABASE repolock`); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	multi := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/repolock?sslmode=disable&target_session_attrs=read-write&connect_timeout=3",
		c.primary.port, c.standby.port)
	// No per-tenant rate limit: its 429s would hide the answers during the
	// switch, which are what this test is about.
	s := startServerWith(t, serverOptions{DatabaseURL: multi, Env: []string{"GC_INTERVAL=0", "REQUEST_TIMEOUT=5s", "RATE_LIMIT=0"}})
	const tenants, workersPerTenant, repos = 4, 2, 30
	tokens := make([]string, tenants)
	for i := range tokens {
		tokens[i] = s.createTenant(t, fmt.Sprintf("ha-%d", i))
	}

	type write struct {
		id, tenant string
		deleted    deleteOutcome
	}
	var (
		mu          sync.Mutex
		acked       = map[string]*write{} // acknowledged creates by id
		statuses    = map[int]int{}
		unexpected  []string
		stoppedAt   time.Time // when the primary was stopped
		recoveredAt time.Time // first acknowledged write after that
		afterStop   atomic.Int64
		okCount     atomic.Int64
		done        = make(chan struct{})
		wg          sync.WaitGroup
	)
	// note records a response to a request sent at start.
	note := func(start time.Time, status int, raw []byte, retry bool) {
		mu.Lock()
		defer mu.Unlock()
		statuses[status]++
		switch {
		case status == http.StatusCreated, status == http.StatusNoContent, status == http.StatusConflict, status == http.StatusServiceUnavailable:
		case status == http.StatusNotFound && retry: // a delete sent again after a 503: the first one was applied
		default:
			unexpected = append(unexpected, fmt.Sprintf("%d %s", status, raw))
		}
		if status == http.StatusCreated || status == http.StatusNoContent {
			okCount.Add(1)
			// Requests sent after the primary stopped: the new primary's.
			if !stoppedAt.IsZero() && start.After(stoppedAt) {
				if recoveredAt.IsZero() {
					recoveredAt = time.Now()
				}
				afterStop.Add(1)
			}
		}
	}
	for ti, token := range tokens {
		for w := range workersPerTenant {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-done:
						return
					default:
					}
					name := fmt.Sprintf("w%d-%d", w, i)
					url := fmt.Sprintf("https://github.com/ha/repo-%d", (ti*13+w*7+i)%repos)
					start := time.Now()
					status, raw := postJSON(t, s, "/v1/applications", token, map[string]any{"name": name, "repo_url": url})
					note(start, status, raw, false)
					if status != http.StatusCreated {
						continue
					}
					var app struct{ ID string }
					_ = json.Unmarshal(raw, &app)
					mu.Lock()
					acked[app.ID] = &write{id: app.ID, tenant: fmt.Sprintf("ha-%d", ti)}
					mu.Unlock()
					if i%3 == 0 {
						outcome := deleteApplication(t, s, token, app.ID, done, note)
						mu.Lock()
						acked[app.ID].deleted = outcome
						mu.Unlock()
					}
				}
			}()
		}
	}

	// A lease worker: acquires and releases one key again and again; the
	// tokens acknowledged must strictly increase across the failover.
	var (
		leaseTokens []int64
		tokensAfter atomic.Int64
	)
	wg.Go(func() {
		lc := s.client(t, tokens[0])
		for {
			select {
			case <-done:
				return
			default:
			}
			start := time.Now()
			l, err := lc.AcquireLease(context.Background(), client.AcquireLeaseRequest{Key: "ha/cron", TTL: time.Second, Wait: 2 * time.Second})
			if err != nil {
				continue // unknown outcome or held by an unknown acquisition: not acknowledged
			}
			mu.Lock()
			leaseTokens = append(leaseTokens, l.FencingToken)
			if !stoppedAt.IsZero() && start.After(stoppedAt) {
				tokensAfter.Add(1)
			}
			mu.Unlock()
			_ = lc.ReleaseLease(context.Background(), l.LeaseID)
		}
	})

	// Mid-load: the primary goes away (as in a crash), the standby is
	// promoted (what Patroni would do).
	// The standby refuses a write transaction as a standby does ("cannot
	// set transaction read-write mode during recovery", 0A000): a server
	// that is not the primary is an outage (503, nothing applied), not a
	// 500. make test-patroni met it once, through its proxy during the
	// switch (which node refused was not recorded).
	fail.Stage("writing to the standby")
	sdb, err := database.Open(context.Background(), c.standby.url("repolock"), database.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	err = sdb.WithTx(context.Background(), func(tx database.Tx) error {
		_, err := tx.ExecContext(context.Background(), `CREATE TABLE ha_never (id int)`)
		return err
	})
	sdb.Close()
	if repolock.ErrorCode(err) != repolock.EUnavailable || !database.OnStandby(err) {
		fail.Fatalf("a write transaction on the standby: %v (code %s), want unavailable, refused by a standby", err, repolock.ErrorCode(err))
	}
	t.Logf("the standby refused a write transaction: %v", err)

	fail.Stage("waiting for 150 acknowledged writes before the crash")
	waitUntil(t, 2*time.Minute, func() bool { return okCount.Load() >= 150 })
	mu.Lock()
	stoppedAt = time.Now()
	mu.Unlock()
	c.primary.stopImmediate()
	c.standby.promote()
	t.Logf("primary stopped and standby promoted in %s", time.Since(stoppedAt).Round(time.Millisecond))

	// Requests succeed again within 10 s, and the load goes on for a while.
	fail.Stage("waiting for writes to succeed again within 10s")
	waitUntil(t, 10*time.Second, func() bool { return afterStop.Load() > 0 })
	fail.Stage("waiting for 100 acknowledged writes and 3 leases after the promotion")
	waitUntil(t, 2*time.Minute, func() bool { return afterStop.Load() >= 100 && tokensAfter.Load() >= 3 })
	close(done)
	wg.Wait()
	fail.Stage("checking the answers and the new primary's data")

	mu.Lock()
	defer mu.Unlock()
	t.Logf("statuses %v; first write sent after the primary stopped acknowledged %s later", statuses, recoveredAt.Sub(stoppedAt).Round(time.Millisecond))
	if len(unexpected) > 0 {
		sort.Strings(unexpected)
		fail.Errorf("%d responses other than 201/204/409/503 (and 404 to a delete sent again), e.g. %s", len(unexpected), unexpected[0])
	}
	if recoveredAt.Sub(stoppedAt) > 10*time.Second {
		fail.Errorf("writes resumed %s after the primary stopped; want within 10s", recoveredAt.Sub(stoppedAt))
	}

	// Fencing tokens strictly increased, before, across and after the
	// failover, and the new primary's counter is at least the last one.
	for i := 1; i < len(leaseTokens); i++ {
		if leaseTokens[i] <= leaseTokens[i-1] {
			fail.Fatalf("fencing tokens went backwards across the failover: %v", leaseTokens)
		}
	}
	t.Logf("%d fencing tokens acknowledged, %d after the failover, last %d", len(leaseTokens), tokensAfter.Load(), leaseTokens[len(leaseTokens)-1])

	// Every acknowledged write is on the new primary.
	db := c.standby.open(t, "repolock")
	defer db.Close()
	var counter int64
	if err := db.QueryRow(`SELECT token FROM lease_tokens WHERE key = 'ha/cron'`).Scan(&counter); err != nil || counter < leaseTokens[len(leaseTokens)-1] {
		fail.Fatalf("lease_tokens on the new primary = %d (%v), below the last acknowledged token %d", counter, err, leaseTokens[len(leaseTokens)-1])
	}
	var inRecovery bool
	if err := db.QueryRow(`SELECT pg_is_in_recovery()`).Scan(&inRecovery); err != nil || inRecovery {
		fail.Fatalf("the promoted standby is still in recovery: %v, %v", inRecovery, err)
	}
	present := map[string]string{}
	rows, err := db.Query(`SELECT a.id, u.name FROM applications a JOIN cluster_users u ON u.id = a.cluster_user_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, tenant string
		if err := rows.Scan(&id, &tenant); err != nil {
			t.Fatal(err)
		}
		present[id] = tenant
	}
	rows.Close()
	var lost, resurrected, kept, unknown int
	var lostIDs []string
	for id, w := range acked {
		owner, ok := present[id]
		switch {
		case w.deleted == deleteUnknown:
			unknown++ // either way is right
		case w.deleted == deleteApplied && ok:
			resurrected++
		case w.deleted == deleteApplied:
		case !ok:
			lost++
			lostIDs = append(lostIDs, id)
		case owner != w.tenant:
			fail.Errorf("application %s belongs to %s on the new primary, was created by %s", id, owner, w.tenant)
		default:
			kept++
		}
	}
	if lost != 0 || resurrected != 0 {
		fail.Fatalf("on the new primary: %d acknowledged creates lost %v, %d acknowledged deletes undone (of %d acknowledged)", lost, lostIDs, resurrected, len(acked))
	}
	t.Logf("%d acknowledged creates (%d still present) all on the new primary; %d deletes had no definite answer when the load stopped", len(acked), kept, unknown)
	fail.Stage("checking ownership on the new primary")
	checkOwnership(t, c.standby.url("repolock"))
}
