package tests

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/lib/pq"

	"github.com/repolock/repolock/internal/dbtest"
)

// The tests of this file drive the real binary through dbtest.Proxy, a TCP
// proxy between the server and Postgres that refuses, resets and restores
// connections, and cuts a COMMIT in flight.

// proxiedServer starts `repolock serve` on a fresh empty database reached
// through a proxy, with scheduled GC off (its commits would race the
// commit-cut test) and no per-tenant rate limit (the load of one tenant
// here is about outages, not fairness), and returns both with a direct
// connection to the database for checks.
func proxiedServer(t *testing.T, down bool, env ...string) (*server, *dbtest.Proxy, *sql.DB) {
	t.Helper()
	dbURL := dbtest.NewDatabase(t, false)
	p, purl := dbtest.NewProxy(t, dbURL)
	if down {
		p.Refuse()
	}
	s := startServerWith(t, serverOptions{DatabaseURL: purl, Env: append([]string{"GC_INTERVAL=0", "RATE_LIMIT=0"}, env...), NoWaitReady: down})
	direct, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	return s, p, direct
}

// exchange is one request's outcome.
type exchange struct {
	status     int
	retryAfter string
	code       string
	message    string
	outcome    string
	body       map[string]any
}

// send is do without failing the test: the load generators run in
// goroutines and report what they got.
func (s *server) send(method, path, token string, body any) (exchange, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, r)
	if err != nil {
		return exchange{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return exchange{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return exchange{}, err
	}
	x := exchange{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After")}
	if err := json.Unmarshal(raw, &x.body); err != nil {
		return x, fmt.Errorf("%s %s: %d: not a JSON object: %q", method, path, res.StatusCode, raw)
	}
	if e, ok := x.body["error"].(map[string]any); ok {
		x.code, _ = e["code"].(string)
		x.message, _ = e["message"].(string)
		x.outcome, _ = e["outcome"].(string)
	}
	return x, nil
}

// isOutage503 is the one shape of an outage.
func (x exchange) isOutage503() bool {
	return x.status == http.StatusServiceUnavailable && x.code == "unavailable" && x.retryAfter == "1" && x.message != ""
}

// answersWithin polls a request until it answers want or the deadline
// passes (the claim under test is "within d"); meanwhile it may answer
// interim, or the 503 of an outage.
func (s *server) answersWithin(t *testing.T, d time.Duration, method, path, token string, want, interim int) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		x, err := s.send(method, path, token, nil)
		if err == nil && x.status == want {
			return
		}
		if err == nil && x.status != interim && !x.isOutage503() {
			t.Fatalf("%s %s: %d %v meanwhile; want %d, %d or the 503 of an outage", method, path, x.status, x.body, want, interim)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s did not answer %d within %v of the database's return (last: %d %v, %v)", method, path, want, d, x.status, x.body, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStartWhileDatabaseDown: serve listens at once with the database
// unreachable, answers /healthz 200, /readyz and the API 503 with
// Retry-After, and gets ready (migrations applied) once it answers.
func TestStartWhileDatabaseDown(t *testing.T) {
	t.Parallel()
	s, p, direct := proxiedServer(t, true)
	if st, resp := s.do(t, http.MethodGet, "/healthz", "", nil); st != http.StatusOK {
		t.Fatalf("healthz while the database is down: %d %v", st, resp)
	}
	for _, r := range []struct{ method, path, token string }{
		{http.MethodGet, "/readyz", ""},
		{http.MethodGet, "/v1/admin/users", s.AdminToken},
		{http.MethodGet, "/v1/me", "rlt_unknown"},
	} {
		x, err := s.send(r.method, r.path, r.token, nil)
		if err != nil || !x.isOutage503() {
			t.Fatalf("%s %s while the database is down: %+v, %v; want 503 unavailable with Retry-After", r.method, r.path, x, err)
		}
	}
	s.waitForLog(t, "a failed connection attempt", func(rec map[string]any) bool { return rec["msg"] == "database unreachable; retrying" })
	var tables int
	if err := direct.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_name = 'cluster_users'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("migrated while the database was unreachable? %d, %v", tables, err)
	}
	p.Restore()
	s.waitForLog(t, "ready", func(rec map[string]any) bool { return rec["msg"] == "ready" })
	if st, resp := s.do(t, http.MethodGet, "/readyz", "", nil); st != http.StatusOK {
		t.Fatalf("readyz after the database came: %d %v", st, resp)
	}
	token := s.createTenant(t, "late")
	if st, resp := s.do(t, http.MethodGet, "/v1/me", token, nil); st != http.StatusOK || resp["name"] != "late" {
		t.Fatalf("me: %d %v", st, resp)
	}
}

// TestOutageUnderLoad: writers create applications and acquire locks while
// the database goes away and comes back. Every failure is the 503 of an
// outage (JSON, Retry-After), never a 500; every acknowledged create is in
// the database afterwards; the service answers within 1 s of the
// database's return.
func TestOutageUnderLoad(t *testing.T) {
	t.Parallel()
	s, p, direct := proxiedServer(t, false)
	token := s.createTenant(t, "loaded")

	const workers = 8
	var (
		mu        sync.Mutex
		acked     []string // ids of applications answered 201
		locked    []string // URLs answered 200 acquired
		bad       []string // anything but 2xx or the 503 of an outage
		unknown   int      // 503s whose outcome is unknown
		successes atomic.Int64
		failures  atomic.Int64
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	record := func(what string, x exchange, err error) bool {
		switch {
		case err != nil:
			mu.Lock()
			bad = append(bad, fmt.Sprintf("%s: %v", what, err))
			mu.Unlock()
		case x.status/100 == 2:
			successes.Add(1)
			return true
		case x.isOutage503():
			failures.Add(1)
			if x.outcome == "unknown" {
				mu.Lock()
				unknown++
				mu.Unlock()
			}
		default:
			mu.Lock()
			bad = append(bad, fmt.Sprintf("%s: %d %v Retry-After %q", what, x.status, x.body, x.retryAfter))
			mu.Unlock()
		}
		return false
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if i%2 == 0 {
					x, err := s.send(http.MethodPost, "/v1/applications", token, map[string]any{
						"name": fmt.Sprintf("app-%d-%d", w, i), "repo_url": fmt.Sprintf("https://github.com/load/app-%d-%d", w, i)})
					if record("create application", x, err) {
						id, _ := x.body["id"].(string)
						mu.Lock()
						acked = append(acked, id)
						mu.Unlock()
					}
				} else {
					url := fmt.Sprintf("github.com/load/lock-%d-%d", w, i)
					x, err := s.send(http.MethodPost, "/v1/locks/acquire", token, map[string]any{"repo_url": "https://" + url})
					if record("acquire", x, err) {
						mu.Lock()
						locked = append(locked, url)
						mu.Unlock()
					}
				}
			}
		}()
	}
	waitCount := func(c *atomic.Int64, n int64, what string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for c.Load() < n {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("no %d %s within a minute (bad: %v)", n, what, bad)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitCount(&successes, 100, "successes before the outage")
	p.Refuse()
	waitCount(&failures, 100, "503s during the outage")
	before := successes.Load()
	p.Restore()
	// Recovery: a request that needs the database answers within 1 s.
	s.answersWithin(t, time.Second, http.MethodGet, "/v1/applications?page_size=1", token, http.StatusOK, http.StatusServiceUnavailable)
	waitCount(&successes, before+100, "successes after the outage")
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%d responses were not 2xx or the 503 of an outage, e.g. %v", len(bad), bad[:min(len(bad), 5)])
	}
	t.Logf("successes %d, 503s %d (outcome unknown: %d), acknowledged applications %d, locks %d",
		successes.Load(), failures.Load(), unknown, len(acked), len(locked))
	var n int
	if err := direct.QueryRow(`SELECT count(*) FROM applications WHERE id = ANY($1::uuid[])`, "{"+strings.Join(acked, ",")+"}").Scan(&n); err != nil || n != len(acked) {
		t.Fatalf("acknowledged applications in the database: %d of %d (%v)", n, len(acked), err)
	}
	if err := direct.QueryRow(`SELECT count(*) FROM RepositoryLockOwner WHERE git_repository_url = ANY($1::text[])`, "{"+strings.Join(locked, ",")+"}").Scan(&n); err != nil || n != len(locked) {
		t.Fatalf("acknowledged locks in the database: %d of %d (%v)", n, len(locked), err)
	}
}

// TestCommitCutMidFlight: the connection is reset right after a COMMIT
// (a transaction) or the Sync of an autocommit statement reached Postgres.
// The client hears 503 "the outcome is unknown" (outcome=unknown), the
// change is in fact committed, re-reading shows it, and the next request
// succeeds.
func TestCommitCutMidFlight(t *testing.T) {
	t.Parallel()
	s, p, direct := proxiedServer(t, false)
	token := s.createTenant(t, "cut")
	// Once LISTEN took effect (which flushes the cache), the token is
	// cached by its first use: the cut below must hit the create, not the
	// authentication.
	s.waitForLog(t, "the token cache listening", func(rec map[string]any) bool {
		return rec["msg"] == "token cache: listening for token changes"
	})
	if st, resp := s.do(t, http.MethodGet, "/v1/me", token, nil); st != http.StatusOK {
		t.Fatalf("me: %d %v", st, resp)
	}
	const unknown = "the database connection was lost while committing: the outcome is unknown; re-read before retrying"
	for _, tc := range []struct {
		name        string
		arm         func() <-chan struct{}
		path, token string
		body        map[string]any
		check       string // counts the row
	}{
		{"transaction (create tenant)", p.CutNextCommit, "/v1/admin/users", s.AdminToken,
			map[string]any{"name": "cut-tenant"}, `SELECT count(*) FROM cluster_users WHERE name = 'cut-tenant'`},
		{"autocommit statement (create application)", p.CutNextStatement, "/v1/applications", token,
			map[string]any{"name": "cut", "repo_url": "https://github.com/acme/cut"}, `SELECT count(*) FROM applications WHERE name = 'cut'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cut := tc.arm()
			x, err := s.send(http.MethodPost, tc.path, tc.token, tc.body)
			select {
			case <-cut:
			case <-time.After(time.Minute):
				t.Fatalf("nothing was cut; the create answered %+v, %v", x, err)
			}
			if err != nil || !x.isOutage503() || x.outcome != "unknown" || x.message != unknown {
				t.Fatalf("create with its commit cut: %+v, %v; want 503 with outcome unknown", x, err)
			}
			var n int
			if err := direct.QueryRow(tc.check).Scan(&n); err != nil || n != 1 {
				t.Fatalf("rows: %d, %v; want 1 (Postgres committed it before the cut)", n, err)
			}
			// The next request succeeds; retrying the create blindly
			// conflicts with what was committed.
			if st, resp := s.do(t, http.MethodPost, tc.path, tc.token, tc.body); st != http.StatusConflict {
				t.Fatalf("retried create: %d %v; want 409", st, resp)
			}
		})
	}
}

// TestTokenRevocationAcrossProcesses: two servers on one database; a token
// cached by the second is refused by it within 1 s of its revocation
// through the first, and so is the token of a tenant deleted through the
// first.
func TestTokenRevocationAcrossProcesses(t *testing.T) {
	t.Parallel()
	a := startServer(t)
	b := startServerWith(t, serverOptions{DatabaseURL: a.DatabaseURL})
	for _, s := range []*server{a, b} {
		s.waitForLog(t, "the token cache listening", func(rec map[string]any) bool {
			return rec["msg"] == "token cache: listening for token changes"
		})
	}
	revoked := a.createTenant(t, "revoked")
	deleted := a.createTenant(t, "deleted")
	for _, tok := range []string{revoked, deleted} {
		// Twice: the second answer comes from b's cache.
		for range 2 {
			if st, resp := b.do(t, http.MethodGet, "/v1/me", tok, nil); st != http.StatusOK {
				t.Fatalf("me on b: %d %v", st, resp)
			}
		}
	}
	if st, resp := a.do(t, http.MethodDelete, "/v1/admin/users/revoked/tokens", a.AdminToken, nil); st != http.StatusOK || resp["revoked"] != 1.0 {
		t.Fatalf("revoke on a: %d %v", st, resp)
	}
	b.answersWithin(t, time.Second, http.MethodGet, "/v1/me", revoked, http.StatusUnauthorized, http.StatusOK)
	if st, resp := a.do(t, http.MethodDelete, "/v1/admin/users/deleted", a.AdminToken, nil); st != http.StatusOK {
		t.Fatalf("delete on a: %d %v", st, resp)
	}
	b.answersWithin(t, time.Second, http.MethodGet, "/v1/me", deleted, http.StatusUnauthorized, http.StatusOK)
}
