package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/fairshare"
	"github.com/repolock/repolock/internal/httpapi"
)

// withShare gives every tenant (and the admin) share requests in flight.
func withShare(share int, wait time.Duration) envOption {
	return func(e *apiEnv, cfg *httpapi.Config) {
		l, err := fairshare.New(fairshare.Config{Share: share, Wait: wait})
		if err != nil {
			e.t.Fatal(err)
		}
		cfg.Share = l
	}
}

// withRate sets the rate limit and the rows a request's worth of a batch.
func withRate(limit float64, burst, rowsPerRequest int) envOption {
	return func(_ *apiEnv, cfg *httpapi.Config) {
		cfg.RateLimit, cfg.RateBurst, cfg.RateRowsPerRequest = limit, burst, rowsPerRequest
	}
}

func eventsBody(n int, cursor0 int64) map[string]any {
	evs := make([]map[string]any, n)
	for i := range evs {
		evs[i] = map[string]any{"cursor": cursor0 + int64(i), "repo": fmt.Sprintf("did:plc:%05d", i), "rev": syncRev(i + 1)}
	}
	return map[string]any{"events": evs}
}

// holdTable locks table against every statement of others until the test
// (or the returned function) ends the transaction.
func holdTable(t *testing.T, e *apiEnv, table string) (pid int, release func()) {
	t.Helper()
	tx, pid := dbtest.BeginWithPID(t, e.db)
	if _, err := tx.ExecContext(t.Context(), `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	return pid, func() { _ = tx.Rollback() }
}

// lockWaiters counts the backends of the test database, other than
// holder's and the asking one, that wait for a lock.
func lockWaiters(t *testing.T, e *apiEnv, holder int) int {
	t.Helper()
	var n int
	if err := e.db.GetContext(context.Background(), &n, `
		SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> $1 AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'`, holder); err != nil {
		t.Fatal(err)
	}
	return n
}

// A tenant with its share of the pool in use gets 429 with Retry-After for
// its next request, after the wait; another tenant and the admin are
// served meanwhile; once the request in flight ends the tenant is served
// again.
func TestTenantShareOfPool(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, withShare(1, 10*time.Millisecond))
	a, b := e.tenant("share-a"), e.tenant("share-b")
	for _, tok := range []string{a, b} {
		e.must(http.StatusCreated, http.MethodPut, "/v1/sync/hosts/pds.example", tok, nil)
	}
	pid, release := holdTable(t, e, "sync_hosts")
	defer release()
	held := make(chan int, 1)
	go func() {
		status, _ := e.call(http.MethodPost, "/v1/sync/hosts/pds.example/events", a, eventsBody(3, 1))
		held <- status
	}()
	dbtest.WaitUntilBlockedAny(t, e.db, pid)

	status, hdr, out := e.send(http.MethodGet, "/v1/me", a, nil, nil)
	resp := e.object(http.MethodGet, "/v1/me", status, out)
	expectError(t, "a's second request", status, resp, http.StatusTooManyRequests, "too_many_requests", "")
	if hdr.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After = %q, want 1", hdr.Get("Retry-After"))
	}
	// b and the admin have shares of their own (b's request does not
	// touch the locked table).
	e.must(http.StatusOK, http.MethodGet, "/v1/me", b, nil)
	e.must(http.StatusOK, http.MethodGet, "/v1/admin/users", adminToken, nil)

	release()
	if st := <-held; st != http.StatusOK {
		t.Fatalf("a's held batch: %d", st)
	}
	e.must(http.StatusOK, http.MethodGet, "/v1/me", a, nil)
}

// A request weighs its body: ceil(share × length / BodyLimit) slots. With
// a share of 4 and one slot in use, a body of the largest size waits for
// all 4 and is refused (429, its body unread), while a light request of
// the same tenant still fits.
func TestShareWeighsBodies(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, withShare(4, 10*time.Millisecond))
	a := e.tenant("weigh-a")
	e.must(http.StatusCreated, http.MethodPut, "/v1/sync/hosts/pds.example", a, nil)
	pid, release := holdTable(t, e, "sync_hosts")
	defer release()
	held := make(chan int, 1)
	go func() {
		status, _ := e.call(http.MethodPost, "/v1/sync/hosts/pds.example/events", a, eventsBody(1, 1))
		held <- status
	}()
	dbtest.WaitUntilBlockedAny(t, e.db, pid)

	// 1 MiB of events (the body limit): it weighs the whole share.
	big := eventsBody(1, 2)
	pad := strings.Repeat("x", 1<<20-200)
	big["events"].([]map[string]any)[0]["repo"] = "did:plc:" + pad[:1000]
	body := mustJSON(t, big)
	body = append(body[:len(body)-1], []byte(`,"_":"`+pad[:1<<20-len(body)-8]+`"}`)...)
	if len(body) > 1<<20 || len(body) < 1<<20-10 {
		t.Fatalf("body of %d bytes", len(body))
	}
	status, hdr, out := e.raw(http.MethodPost, "/v1/sync/hosts/pds.example/events", a, "application/json", body)
	resp := e.object(http.MethodPost, "events", status, out)
	expectError(t, "a body of the largest size", status, resp, http.StatusTooManyRequests, "too_many_requests", "")
	if hdr.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After = %q", hdr.Get("Retry-After"))
	}
	e.must(http.StatusOK, http.MethodGet, "/v1/me", a, nil)

	release()
	if st := <-held; st != http.StatusOK {
		t.Fatalf("held request: %d", st)
	}
	// With nothing else in flight, the same body is admitted (and refused
	// for its unknown field: it was read).
	e.wantErr(http.StatusBadRequest, "invalid_argument", http.MethodPost, "/v1/sync/hosts/pds.example/events", a, json.RawMessage(body))
}

// Batch routes cost one request per RateRowsPerRequest rows (at most the
// burst): the batch is admitted, and the tenant's next request is refused
// until the bucket refills; another tenant is not affected. With the
// charging off a batch is one request.
func TestBatchesChargedByRows(t *testing.T) {
	t.Parallel()
	// 0.01/s: the bucket does not refill within the test.
	for _, tc := range []struct {
		name       string
		rows       int
		perRequest int
		wantNext   int
	}{
		{"1000 events cost 10 of 10", 1000, 100, http.StatusTooManyRequests},
		{"5000 events cost the burst", 5000, 100, http.StatusTooManyRequests},
		{"999 events cost 10 of 10", 999, 100, http.StatusTooManyRequests},
		{"800 events cost 8 of 10", 800, 100, http.StatusOK},
		{"charging off", 5000, 0, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newAPIEnv(t, withRate(0.01, 10, tc.perRequest)).on(t)
			a, b := e.tenant("cost-a"), e.tenant("cost-b")
			// The tenants' buckets are used by the setup: 1 token each.
			e.must(http.StatusCreated, http.MethodPut, "/v1/sync/hosts/pds.example", a, nil)
			e.must(http.StatusOK, http.MethodPost, "/v1/sync/hosts/pds.example/events", a, eventsBody(tc.rows, 1))
			status, hdr, out := e.send(http.MethodGet, "/v1/me", a, nil, nil)
			if status != tc.wantNext {
				t.Fatalf("next request: %d %s, want %d", status, out, tc.wantNext)
			}
			if status == http.StatusTooManyRequests {
				if s, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || s < 1 {
					t.Fatalf("Retry-After = %q", hdr.Get("Retry-After"))
				}
			}
			e.must(http.StatusOK, http.MethodGet, "/v1/me", b, nil)
		})
	}
	t.Run("listing", func(t *testing.T) {
		t.Parallel()
		e := newAPIEnv(t, withRate(0.01, 10, 100)).on(t)
		a := e.tenant("cost-a")
		e.must(http.StatusCreated, http.MethodPut, "/v1/sync/hosts/pds.example", a, nil)
		repos := make([]map[string]any, 1000)
		for i := range repos {
			repos[i] = map[string]any{"repo": fmt.Sprintf("did:plc:%05d", i), "rev": syncRev(1)}
		}
		e.must(http.StatusOK, http.MethodPost, "/v1/sync/hosts/pds.example/listing", a, map[string]any{"cursor_before": 0, "repos": repos})
		e.wantErr(http.StatusTooManyRequests, "too_many_requests", http.MethodGet, "/v1/me", a, nil)
	})
}

// A request's deadline is its statements' deadline: a request that times
// out, or whose client goes away, leaves no statement waiting in Postgres
// and no connection held, on every route that does unbounded work (batches,
// listings, KV commits, reports, GC and re-key runs).
func TestRequestDeadlineFreesConnection(t *testing.T) {
	t.Parallel()
	type route struct {
		name, table, method, path string
		admin                     bool
		body                      func(e *apiEnv, tok string) any
	}
	routes := []route{
		{name: "sync events", table: "sync_hosts", method: http.MethodPost, path: "/v1/sync/hosts/pds.example/events",
			body: func(*apiEnv, string) any { return eventsBody(100, 1) }},
		{name: "sync listing", table: "sync_repositories", method: http.MethodPost, path: "/v1/sync/hosts/pds.example/listing",
			body: func(*apiEnv, string) any {
				return map[string]any{"cursor_before": 0, "repos": []map[string]any{{"repo": "did:plc:1", "rev": syncRev(1)}}}
			}},
		{name: "lock listing", table: "RepositoryLockOwner", method: http.MethodGet, path: "/v1/locks"},
		{name: "sync repos listing", table: "sync_repositories", method: http.MethodGet, path: "/v1/sync/repos"},
		{name: "KV commit", table: "kv", method: http.MethodPost, path: "/v1/repositories/lake/branches/main/commits",
			body: func(*apiEnv, string) any { return map[string]any{"message": "m", "committer": "c"} }},
		{name: "report", table: "report_ownership_totals", method: http.MethodGet, path: "/v1/admin/reports/ownership", admin: true}, // its figures (migration 000023), not the locks
		{name: "GC run", table: "RepositoryLockOwner", method: http.MethodPost, path: "/v1/admin/gc?min_age=0s", admin: true},
		{name: "re-key run", table: "RepositoryLockOwner", method: http.MethodPost, path: "/v1/admin/rekey", admin: true},
	}
	for _, how := range []string{"timeout", "abandoned"} {
		for _, r := range routes {
			t.Run(how+"/"+r.name, func(t *testing.T) {
				t.Parallel()
				timeout := time.Minute
				if how == "timeout" {
					// Long enough for the test to see the request wait on
					// the held table first, on a loaded CI machine too
					// (300 ms was not: WaitUntilBlockedAny missed it).
					timeout = 3 * time.Second
				}
				e := newAPIEnv(t, withRequestTimeout(timeout)).on(t)
				tok := e.tenant("deadline")
				e.must(http.StatusCreated, http.MethodPut, "/v1/sync/hosts/pds.example", tok, nil)
				e.must(http.StatusCreated, http.MethodPost, "/v1/repositories", tok,
					map[string]any{"name": "lake", "storage_namespace": "s3://b/lake", "default_branch": "main"})
				if r.admin {
					tok = adminToken
				}
				var body any
				if r.body != nil {
					body = r.body(e, tok)
				}
				pid, release := holdTable(t, e, r.table)
				defer release()

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan int, 1)
				go func() {
					req, err := http.NewRequestWithContext(ctx, r.method, e.ts.URL+r.path, jsonReader(t, body))
					if err != nil {
						panic(err)
					}
					req.Header.Set("Authorization", "Bearer "+tok)
					if body != nil {
						req.Header.Set("Content-Type", "application/json")
					}
					res, err := http.DefaultClient.Do(req)
					if err != nil {
						done <- 0 // abandoned: the client saw no answer
						return
					}
					res.Body.Close()
					done <- res.StatusCode
				}()
				dbtest.WaitUntilBlockedAny(t, e.db, pid)
				if how == "abandoned" {
					cancel()
				}
				status := <-done
				if how == "timeout" && status != http.StatusGatewayTimeout {
					t.Fatalf("timed-out request: status %d, want 504", status)
				}
				if how == "abandoned" {
					// The server recorded 499, not a 5xx of its own.
					deadline := time.Now().Add(30 * time.Second)
					for {
						_, _, raw := e.raw(http.MethodGet, "/metrics", "", "", nil)
						metrics := string(raw)
						if strings.Contains(metrics, `status="5`) {
							t.Fatalf("an abandoned request counted as a 5xx:\n%s", grepLines(metrics, "repolock_http_requests_total"))
						}
						if strings.Contains(metrics, `status="499"`) {
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("no 499 recorded:\n%s", grepLines(metrics, "repolock_http_requests_total"))
						}
						time.Sleep(5 * time.Millisecond)
					}
				}
				// The table is still locked: nothing of the request may
				// still wait for it.
				deadline := time.Now().Add(30 * time.Second)
				for lockWaiters(t, e, pid) > 0 {
					if time.Now().After(deadline) {
						t.Fatal("a statement of the ended request still waits in Postgres")
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
	}
}

// jsonReader is body as JSON, or no body for nil.
func jsonReader(t testing.TB, body any) io.Reader {
	if body == nil {
		return nil
	}
	return bytes.NewReader(mustJSON(t, body))
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
