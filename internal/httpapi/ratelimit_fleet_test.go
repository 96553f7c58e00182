package httpapi_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/repolock/repolock/internal/httpapi"
)

// TestRateLimitFleetShare: with RateReplicas, each process enforces its
// share of the fleet's rate and burst (limit/n, ceil(burst/n)), and a
// tenant's bucket is resized when the fleet changes: the tokens it holds
// are kept, capped at the new burst. The refill rate is so low that no
// token is refilled during the test: no clock involved.
func TestRateLimitFleetShare(t *testing.T) {
	t.Parallel()
	var replicas atomic.Int64
	replicas.Store(3)
	e := newAPIEnv(t, withRateLimit(0.001, 7), func(_ *apiEnv, cfg *httpapi.Config) {
		cfg.RateReplicas = func() int { return int(replicas.Load()) }
	})
	alice := e.tenant("alice")
	bob := e.tenant("bob")

	// Three replicas: ceil(7/3) = 3 requests, then 429 naming the fleet's
	// figures; one token takes 3 / 0.001 s to come back here.
	for range 3 {
		e.must(http.StatusOK, http.MethodGet, "/v1/me", alice, nil)
	}
	status, hdr, out := e.send(http.MethodGet, "/v1/me", alice, nil, nil)
	expectError(t, "4th request of 3 replicas", status, e.object(http.MethodGet, "/v1/me", status, out), http.StatusTooManyRequests, "too_many_requests",
		"too many requests: this tenant may send 0.001 per second (bursts of 7) across the 3 replicas of this service; retry after 3000 s")
	if ra := hdr.Get("Retry-After"); ra != "3000" {
		t.Fatalf("Retry-After = %q, want 3000", ra)
	}

	// The fleet shrinks to this process alone (the others died): the
	// bucket is resized, but holds no more tokens than it had.
	replicas.Store(1)
	status, hdr, out = e.send(http.MethodGet, "/v1/me", alice, nil, nil)
	expectError(t, "after the fleet shrank", status, e.object(http.MethodGet, "/v1/me", status, out), http.StatusTooManyRequests, "too_many_requests",
		"too many requests: this tenant may send 0.001 per second (bursts of 7); retry after 1000 s")
	if ra := hdr.Get("Retry-After"); ra != "1000" {
		t.Fatalf("Retry-After = %q, want 1000 (one token at the whole rate)", ra)
	}

	// A new bucket in a fleet of one holds 7; bob spends 2, then the fleet
	// grows to 3: the 5 left are capped at the new burst, 3.
	for range 2 {
		e.must(http.StatusOK, http.MethodGet, "/v1/me", bob, nil)
	}
	replicas.Store(3)
	for range 3 {
		e.must(http.StatusOK, http.MethodGet, "/v1/me", bob, nil)
	}
	e.wantErr(http.StatusTooManyRequests, "too_many_requests", http.MethodGet, "/v1/me", bob, nil)

	// A fleet size below 1 (never counted) is this process alone.
	replicas.Store(0)
	carol := e.tenant("carol")
	for range 7 {
		e.must(http.StatusOK, http.MethodGet, "/v1/me", carol, nil)
	}
	e.wantErr(http.StatusTooManyRequests, "too_many_requests", http.MethodGet, "/v1/me", carol, nil)
}
