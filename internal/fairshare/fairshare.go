// Package fairshare bounds how much of the database pool one tenant's
// requests may hold at once: each key (a tenant, or the admin token) has at
// most Share requests in flight; a request beyond its key's share waits up
// to Wait for one of them to end, then is refused (the HTTP API answers 429
// with Retry-After). A request in flight counts as one connection: every
// handler of the API holds at most one pool connection at a time, so a
// tenant can never hold more than Share connections, and the others keep
// PoolSize-Share of them whatever it sends.
package fairshare

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultShareFraction is the default share of the pool: half of it.
const DefaultShareFraction = 0.5

// DefaultWait is how long a request beyond its share waits by default.
const DefaultWait = 100 * time.Millisecond

// ShareOf returns the share of a pool of poolSize connections that fraction
// (0 < fraction <= 1) gives one key: floor(fraction × poolSize), at most
// poolSize-1 (at least one connection is left for everyone else) and at
// least 1 (a pool of one connection cannot leave one over: every key then
// gets that one).
func ShareOf(poolSize int, fraction float64) int {
	n := int(fraction * float64(poolSize))
	n = min(n, poolSize-1)
	return max(n, 1)
}

// ErrOverShare is Acquire's answer when the key's share stayed full for the
// whole wait.
var ErrOverShare = errors.New("fairshare: the share is in use")

// Config configures a Limiter.
type Config struct {
	// Share is the most requests one key may have in flight; at least 1
	// (ShareOf computes it from the pool).
	Share int
	// Wait is how long a request beyond its share waits for a slot before
	// ErrOverShare; 0 refuses it at once.
	Wait time.Duration
	// Registry, when not nil, gets the limiter's counters
	// (repolock_tenant_share_waits_total,
	// repolock_tenant_share_rejections_total).
	Registry prometheus.Registerer
}

// Limiter is the shares of one pool. Its zero value is not usable; build
// it with New. It is safe for concurrent use.
type Limiter struct {
	share int
	wait  time.Duration

	mu   sync.Mutex
	keys map[string]*slots

	waits, rejections prometheus.Counter
}

// slots is one key's share: a semaphore, and how many requests use it
// (holding or waiting), so that an unused key is dropped from the map.
type slots struct {
	sem   chan struct{}
	users int
}

// New returns a Limiter; an invalid Config is an error.
func New(cfg Config) (*Limiter, error) {
	if cfg.Share < 1 {
		return nil, fmt.Errorf("fairshare: Share must be at least 1, got %d", cfg.Share)
	}
	if cfg.Wait < 0 {
		return nil, fmt.Errorf("fairshare: Wait must not be negative, got %s", cfg.Wait)
	}
	l := &Limiter{
		share: cfg.Share,
		wait:  cfg.Wait,
		keys:  map[string]*slots{},
		waits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "repolock_tenant_share_waits_total",
			Help: "Requests that found their tenant's share of the database pool in use and waited for a slot.",
		}),
		rejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "repolock_tenant_share_rejections_total",
			Help: "Requests refused (429) because their tenant's share of the database pool stayed in use for the whole wait.",
		}),
	}
	if cfg.Registry != nil {
		for _, c := range []prometheus.Collector{l.waits, l.rejections} {
			if err := cfg.Registry.Register(c); err != nil {
				return nil, fmt.Errorf("fairshare: register the metrics: %w", err)
			}
		}
	}
	return l, nil
}

// Share is the most requests one key may have in flight.
func (l *Limiter) Share() int { return l.share }

// Wait is how long a request beyond its share waits.
func (l *Limiter) Wait() time.Duration { return l.wait }

// Acquire takes one of key's slots, waiting up to the Limiter's Wait for
// one. It returns the function that gives the slot back (call it once, when
// the request ends), or ErrOverShare, or ctx's error when ctx ended first.
func (l *Limiter) Acquire(ctx context.Context, key string) (release func(), err error) {
	l.mu.Lock()
	s, ok := l.keys[key]
	if !ok {
		s = &slots{sem: make(chan struct{}, l.share)}
		l.keys[key] = s
	}
	s.users++
	l.mu.Unlock()

	release = func() {
		<-s.sem
		l.leave(key, s)
	}
	select {
	case s.sem <- struct{}{}:
		return release, nil
	default:
	}
	if err := ctx.Err(); err != nil {
		l.leave(key, s)
		return nil, err
	}
	l.waits.Inc()
	if l.wait > 0 {
		t := time.NewTimer(l.wait)
		defer t.Stop()
		select {
		case s.sem <- struct{}{}:
			return release, nil
		case <-ctx.Done():
			l.leave(key, s)
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	l.leave(key, s)
	l.rejections.Inc()
	return nil, ErrOverShare
}

// InFlight is how many requests of key hold a slot now.
func (l *Limiter) InFlight(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.keys[key]; ok {
		return len(s.sem)
	}
	return 0
}

// leave drops one user of key's slots, and the key when it has none.
func (l *Limiter) leave(key string, s *slots) {
	l.mu.Lock()
	s.users--
	if s.users == 0 && l.keys[key] == s {
		delete(l.keys, key)
	}
	l.mu.Unlock()
}
