package httpapi

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/repolock/repolock"
)

// Default per-tenant rate limit: a token bucket refilled at
// DefaultRateLimit requests per second holding DefaultRateBurst.
const (
	DefaultRateLimit = 50
	DefaultRateBurst = 100
)

// tenantLimiter is one token bucket per tenant (golang.org/x/time/rate).
// Buckets idle for longer than it takes to refill are dropped by sweep, so
// the map stays as small as the set of recently active tenants.
type tenantLimiter struct {
	limit rate.Limit
	burst int

	mu        sync.Mutex
	buckets   map[string]*rate.Limiter
	lastSweep time.Time
}

// newTenantLimiter returns the limiter of Config.RateLimit and RateBurst,
// or nil when the limit is off (0, as on the --rate-limit flag).
func newTenantLimiter(limit float64, burst int) *tenantLimiter {
	if limit <= 0 {
		return nil // off
	}
	if burst <= 0 {
		burst = DefaultRateBurst
	}
	return &tenantLimiter{limit: rate.Limit(limit), burst: burst, buckets: map[string]*rate.Limiter{}}
}

// wait returns how long the tenant must wait before its next request is
// allowed: 0 when it may go now (and then the request is counted).
func (l *tenantLimiter) wait(tenantID string, now time.Time) time.Duration {
	l.mu.Lock()
	l.sweep(now)
	b, ok := l.buckets[tenantID]
	if !ok {
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[tenantID] = b
	}
	l.mu.Unlock()
	r := b.ReserveN(now, 1)
	if !r.OK() {
		return time.Second
	}
	d := r.DelayFrom(now)
	if d > 0 {
		r.CancelAt(now)
	}
	return d
}

// sweep drops full buckets (a bucket refilled to its burst is the same as a
// new one) at most once a minute. l.mu is held.
func (l *tenantLimiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Minute {
		return
	}
	l.lastSweep = now
	for id, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, id)
		}
	}
}

// limitTenant answers 429 too_many_requests with Retry-After (whole
// seconds, at least 1) when the tenant's bucket is empty. The admin token
// is never limited (it is not a tenant).
func (s *Server) limitTenant(c echo.Context, tenantID string) error {
	if s.limiter == nil {
		return nil
	}
	d := s.limiter.wait(tenantID, time.Now())
	if d <= 0 {
		return nil
	}
	secs := int(math.Ceil(d.Seconds()))
	if secs < 1 {
		secs = 1
	}
	c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
	return repolock.Errorf(repolock.ETooManyRequests, "too many requests: this tenant may send %g per second (bursts of %d); retry after %d s",
		float64(s.limiter.limit), s.limiter.burst, secs)
}
