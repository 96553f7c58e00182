package httpapi

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/fairshare"
)

// Default per-tenant rate limit: a token bucket refilled at
// DefaultRateLimit requests per second holding DefaultRateBurst.
// DefaultRateRowsPerRequest is how many rows of a batch route (the events
// of a sync batch, the repositories of a listing) cost as much as one
// request.
const (
	DefaultRateLimit          = 50
	DefaultRateBurst          = 100
	DefaultRateRowsPerRequest = 100
)

// tenantLimiter is one token bucket per tenant (golang.org/x/time/rate).
// Buckets idle for longer than it takes to refill are dropped by sweep, so
// the map stays as small as the set of recently active tenants.
//
// limit and burst are the fleet's: with replicas (fleet.Membership.Replicas)
// each bucket holds this process's share, limit/n and ceil(burst/n) (at
// least 1), for the n the fleet had when the bucket was last used; a bucket
// is resized at its next use after n changes (SetLimitAt and SetBurstAt:
// the tokens it holds are kept, capped at the new burst).
type tenantLimiter struct {
	limit    rate.Limit
	burst    int
	replicas func() int // nil: this process alone

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

// bucket is a tenant's token bucket sized for a fleet of n replicas.
type bucket struct {
	*rate.Limiter
	n int
}

// newTenantLimiter returns the limiter of Config.RateLimit, RateBurst and
// RateReplicas, or nil when the limit is off (0, as on the --rate-limit
// flag).
func newTenantLimiter(limit float64, burst int, replicas func() int) *tenantLimiter {
	if limit <= 0 {
		return nil // off
	}
	if burst <= 0 {
		burst = DefaultRateBurst
	}
	return &tenantLimiter{limit: rate.Limit(limit), burst: burst, replicas: replicas, buckets: map[string]*bucket{}}
}

// fleet returns the number of replicas sharing the limits (at least 1).
func (l *tenantLimiter) fleet() int {
	if l.replicas == nil {
		return 1
	}
	return max(l.replicas(), 1)
}

// share is this process's rate and burst in a fleet of n replicas.
func (l *tenantLimiter) share(n int) (rate.Limit, int) {
	return l.limit / rate.Limit(n), max((l.burst+n-1)/n, 1)
}

// wait returns how long the tenant must wait before its next request is
// allowed: 0 when it may go now (and then the request is counted).
func (l *tenantLimiter) wait(tenantID string, now time.Time) time.Duration {
	r := l.bucket(tenantID, now).ReserveN(now, 1)
	if !r.OK() {
		return time.Second
	}
	d := r.DelayFrom(now)
	if d > 0 {
		r.CancelAt(now)
	}
	return d
}

// bucket returns the tenant's bucket sized for the fleet as it is now,
// made full when it has none.
func (l *tenantLimiter) bucket(tenantID string, now time.Time) *rate.Limiter {
	n := l.fleet()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b, ok := l.buckets[tenantID]
	switch {
	case !ok:
		lim, burst := l.share(n)
		b = &bucket{Limiter: rate.NewLimiter(lim, burst), n: n}
		l.buckets[tenantID] = b
	case b.n != n:
		lim, burst := l.share(n)
		b.SetLimitAt(now, lim)
		b.SetBurstAt(now, burst)
		b.n = n
	}
	return b.Limiter
}

// charge takes n more tokens from the tenant's bucket, at most its burst,
// whether it holds them or not: the bucket may go below zero, and the
// tenant's next requests then wait (429) until it is refilled.
func (l *tenantLimiter) charge(tenantID string, n int, now time.Time) {
	if n <= 0 {
		return
	}
	b := l.bucket(tenantID, now)
	b.ReserveN(now, min(n, b.Burst()))
}

// sweep drops full buckets (a bucket refilled to its burst is the same as a
// new one) at most once a minute. l.mu is held.
func (l *tenantLimiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Minute {
		return
	}
	l.lastSweep = now
	for id, b := range l.buckets {
		if b.TokensAt(now) >= float64(b.Burst()) {
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
	s.metrics.observeRateLimit(tenantID, d > 0)
	if d <= 0 {
		return nil
	}
	secs := retryAfter(c, d)
	fleet := ""
	if n := s.limiter.fleet(); n > 1 {
		fleet = fmt.Sprintf(" across the %d replicas of this service", n)
	}
	return repolock.Errorf(repolock.ETooManyRequests, "too many requests: this tenant may send %g per second (bursts of %d)%s%s; retry after %d s",
		float64(s.limiter.limit), s.limiter.burst, fleet, s.rowsNote(), secs)
}

// retryAfter sets Retry-After to d in whole seconds, at least 1, and
// returns them.
func retryAfter(c echo.Context, d time.Duration) int {
	secs := max(int(math.Ceil(d.Seconds())), 1)
	c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
	return secs
}

func (s *Server) rowsNote() string {
	if s.cfg.RateRowsPerRequest <= 0 {
		return ""
	}
	return ", a batch counting one request per " + strconv.Itoa(s.cfg.RateRowsPerRequest) + " rows"
}

// chargeRows charges a batch route by its cost in the rate limit. Handlers
// of batch routes call it once they know the number of rows, before
// touching the database: a batch of rows rows costs ceil(rows /
// RateRowsPerRequest) requests (at most the burst, so that every valid
// batch can pass), of which its admission already took one. The batch
// itself goes on (it was admitted with a token in the bucket); what it
// costs beyond is taken from the tenant's next requests. Off when the rate
// limit or RateRowsPerRequest is.
func (s *Server) chargeRows(c echo.Context, rows int) {
	per := s.cfg.RateRowsPerRequest
	if u, ok := c.Get(ctxKeyTenant).(tenantValue); ok && s.limiter != nil && per > 0 {
		cost := (rows + per - 1) / per
		s.limiter.charge(u.ID, cost-1, time.Now())
	}
}

// adminShareKey is the admin token's key in the fair share: the admin
// requests (GC and re-key runs, reports, tenant management) share one share
// of their own, as if the admin were one more tenant.
const adminShareKey = "\x00admin"

// admitTenant lets a tenant's request through the tenant's rate limit and
// its share of the database pool (Config.Share), runs it and gives the
// share back.
func (s *Server) admitTenant(c echo.Context, tenantID string, next echo.HandlerFunc) error {
	if err := s.limitTenant(c, tenantID); err != nil {
		return err
	}
	return s.withShare(c, tenantID, next)
}

// admitAdmin lets a request of the admin token through the admin's share of
// the pool (the admin is not rate limited).
func (s *Server) admitAdmin(c echo.Context, next echo.HandlerFunc) error {
	return s.withShare(c, adminShareKey, next)
}

// withShare runs next holding its weight of key's share (Config.Share):
// shareWeight slots. A request that finds too few free waits up to
// Share.Wait() for them, behind the key's requests that came first, then
// gets 429 too_many_requests with Retry-After: 1, never a wait for a pool
// connection that ends in 504. Nothing of its body has been read then.
func (s *Server) withShare(c echo.Context, key string, next echo.HandlerFunc) error {
	if s.cfg.Share == nil {
		return next(c)
	}
	w := s.shareWeight(c.Request().ContentLength)
	n, err := s.cfg.Share.Acquire(c.Request().Context(), key, w)
	if errors.Is(err, fairshare.ErrOverShare) {
		retryAfter(c, time.Second)
		weight := ""
		switch length := c.Request().ContentLength; {
		case w > 1 && length < 0:
			weight = fmt.Sprintf(" (this request, for a body of unknown length, all %d)", w)
		case w > 1:
			weight = fmt.Sprintf(" (this request, for its %d-byte body, %d of them)", length, w)
		}
		return repolock.Errorf(repolock.ETooManyRequests,
			"too many requests in flight: this tenant's requests may hold %d of the database's connections at once%s; retry after 1 s",
			s.cfg.Share.Share(), weight)
	}
	if err != nil {
		return err
	}
	var once sync.Once
	release := func() { once.Do(func() { s.cfg.Share.Release(key, n) }) }
	defer release()
	c.Set(ctxKeyShareRelease, release)
	return next(c)
}

// ctxKeyShareRelease holds, while a request holds its share (withShare),
// the function that gives it back early (releaseShare).
const ctxKeyShareRelease = "repolock.share_release"

// releaseShare gives the request's slots of its tenant's share back before
// the request ends: for a request that goes on without holding a database
// connection (a watcher waiting for events). Idempotent; nothing without
// a share.
func releaseShare(c echo.Context) {
	if release, ok := c.Get(ctxKeyShareRelease).(func()); ok {
		release()
	}
}

// shareWeight is how many slots of its tenant's share a request with a
// body of length bytes holds: ceil(Share × length / BodyLimit), at least
// 1. The body is what makes a request heavy (a sync batch of 10,000 events
// is about 0.6 MiB), and its length is known before it is read: a body of
// the largest size holds the whole share and runs alone. A body of unknown
// length (chunked) weighs as the largest.
func (s *Server) shareWeight(length int64) int {
	if length < 0 || length > s.cfg.BodyLimit {
		length = s.cfg.BodyLimit
	}
	share := int64(s.cfg.Share.Share())
	return int(max((share*length+s.cfg.BodyLimit-1)/s.cfg.BodyLimit, 1))
}
