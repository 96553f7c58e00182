package httpapi_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/repolock/repolock/internal/authguard"
	"github.com/repolock/repolock/internal/httpapi"
)

// withAuthGuard sets Config.AuthGuard and Config.TrustForwardedFor.
func withAuthGuard(g *authguard.Guard, trustForwardedFor bool) envOption {
	return func(_ *apiEnv, cfg *httpapi.Config) { cfg.AuthGuard, cfg.TrustForwardedFor = g, trustForwardedFor }
}

// from is the header of a request a trusted proxy forwarded for addr.
func from(addr string) http.Header { return http.Header{"X-Forwarded-For": {addr}} }

// TestAuthFailuresThrottledPerAddress: an address that spent its budget of
// failed authentications gets 429 with Retry-After for every token, the
// admin's included, while other addresses are served.
func TestAuthFailuresThrottledPerAddress(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, withAuthGuard(authguard.New(authguard.Defaults()), true))
	tenant := e.tenant("alice")
	const guesser, operator = "192.0.2.1", "192.0.2.2"
	for i := range authguard.DefaultPerAddressBurst {
		path, tok := "/v1/admin/users", "rla_guess"
		if i%2 == 1 {
			path, tok = "/v1/me", "rlt_guess" // tenant routes count too
		}
		if st, _, body := e.send(http.MethodGet, path, tok, from(guesser), nil); st != http.StatusUnauthorized {
			t.Fatalf("failure %d within the budget: %d %s", i+1, st, body)
		}
	}
	for _, tc := range []struct{ path, token string }{
		{"/v1/admin/users", "rla_guess"}, {"/v1/admin/users", adminToken}, {"/v1/me", tenant},
	} {
		st, h, body := e.send(http.MethodGet, tc.path, tc.token, from(guesser), nil)
		if st != http.StatusTooManyRequests || h.Get("Retry-After") != "6" {
			t.Fatalf("%s from the guesser over its budget: %d Retry-After %q %s; want 429 and 6", tc.path, st, h.Get("Retry-After"), body)
		}
		expectError(t, tc.path, st, e.object("GET", tc.path, st, body), http.StatusTooManyRequests, "too_many_requests",
			"too many failed authentications; retry after 6 s")
	}
	e.must(http.StatusOK, http.MethodGet, "/v1/me", tenant, nil) // the test client's own address
	if st, _, _ := e.send(http.MethodGet, "/v1/admin/users", adminToken, from(operator), nil); st != http.StatusOK {
		t.Fatalf("the operator's address: %d", st)
	}
}

// TestAuthForwardedForNotTrustedByDefault: without TrustForwardedFor, a
// guesser cannot get a fresh budget by writing X-Forwarded-For.
func TestAuthForwardedForNotTrustedByDefault(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, withAuthGuard(authguard.New(authguard.Defaults()), false))
	for i := range authguard.DefaultPerAddressBurst + 1 {
		st, _, _ := e.send(http.MethodGet, "/v1/admin/users", "rla_guess", from(fmt.Sprintf("192.0.2.%d", i+1)), nil)
		want := http.StatusUnauthorized
		if i == authguard.DefaultPerAddressBurst {
			want = http.StatusTooManyRequests
		}
		if st != want {
			t.Fatalf("attempt %d: %d, want %d", i+1, st, want)
		}
	}
}

// TestAuthFloodDoesNotLockOutAdmin: wrong tokens from many addresses,
// concurrently, exhaust the global budget and get 429 with Retry-After;
// the admin token, from an address of its own, is served every time.
func TestAuthFloodDoesNotLockOutAdmin(t *testing.T) {
	t.Parallel()
	g := authguard.New(authguard.Config{PerAddressRate: 0.0001, PerAddressBurst: 3,
		GlobalRate: 0.0001, GlobalBurst: 20, MaxAddresses: 1000})
	e := newAPIEnv(t, withAuthGuard(g, true))
	const attackers, perAttacker, adminCalls = 40, 4, 20
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
		bad      []string
	)
	for i := range attackers {
		wg.Go(func() {
			path, tok := "/v1/admin/users", "rla_guess"
			if i%2 == 1 {
				path, tok = "/v1/applications", "rlt_guess"
			}
			for range perAttacker {
				st, h, _ := e.send(http.MethodGet, path, tok, from(fmt.Sprintf("198.51.100.%d", i+1)), nil)
				mu.Lock()
				statuses[st]++
				if st == http.StatusTooManyRequests && h.Get("Retry-After") == "" {
					bad = append(bad, "429 without Retry-After")
				}
				mu.Unlock()
			}
		})
	}
	for range adminCalls {
		wg.Go(func() {
			if st, _, body := e.send(http.MethodGet, "/v1/admin/users", adminToken, from("203.0.113.9"), nil); st != http.StatusOK {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("admin: %d %s", st, body))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatal(bad)
	}
	// 20 failures fit the global budget; every other wrong token is 429
	// (the global budget, or the attacker's own after 3).
	if statuses[http.StatusUnauthorized] != 20 || statuses[http.StatusTooManyRequests] != attackers*perAttacker-20 || len(statuses) != 2 {
		t.Fatalf("wrong tokens answered %v, want 20 × 401 and the rest 429", statuses)
	}
	e.must(http.StatusOK, http.MethodGet, "/v1/admin/users", adminToken, nil)
}
