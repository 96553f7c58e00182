// Package fairshare bounds how much of the database pool one tenant's
// requests may hold at once: each key (a tenant, or the admin token) has
// Share slots; a request takes one (a heavy one more: the HTTP API weighs a
// batch by its rows), and a request that finds too few free waits up to
// Wait, first come first served, then is refused (the HTTP API answers 429
// with Retry-After). Every handler of the API holds at most one pool
// connection at a time, so a tenant never holds more than Share
// connections, and the others keep PoolSize-Share of them whatever it
// sends; weighing heavy requests also bounds the database time one tenant
// can take at once, not only its connections.
package fairshare

import (
	"container/list"
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
const DefaultWait = time.Second

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

// slots is one key's share: the slots in use and the requests waiting for
// some, first come first served (a large request at the head is not
// overtaken by small ones behind it).
type slots struct {
	used    int
	waiters list.List // of *waiter
}

type waiter struct {
	n     int
	ready chan struct{} // closed when the slots are granted
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

// Share is the most slots one key may hold.
func (l *Limiter) Share() int { return l.share }

// Wait is how long a request beyond its share waits.
func (l *Limiter) Wait() time.Duration { return l.wait }

// Acquire takes n of key's slots (n is cut to 1..Share), waiting up to the
// Limiter's Wait for them, behind the requests of key that came first. It
// returns the number taken, which the caller gives back with Release when
// the request ends, or ErrOverShare, or ctx's error when ctx ended first.
func (l *Limiter) Acquire(ctx context.Context, key string, n int) (int, error) {
	n = min(max(n, 1), l.share)
	l.mu.Lock()
	s, ok := l.keys[key]
	if !ok {
		s = &slots{}
		l.keys[key] = s
	}
	if s.waiters.Len() == 0 && s.used+n <= l.share {
		s.used += n
		l.mu.Unlock()
		return n, nil
	}
	if err := ctx.Err(); err != nil || l.wait == 0 {
		l.drop(key, s)
		l.mu.Unlock()
		if err != nil {
			return 0, err
		}
		l.rejections.Inc()
		return 0, ErrOverShare
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	elem := s.waiters.PushBack(w)
	l.mu.Unlock()
	l.waits.Inc()

	t := time.NewTimer(l.wait)
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = ErrOverShare
	}
	l.mu.Lock()
	select {
	case <-w.ready:
		// Granted as the wait ended: give the slots back.
		s.used -= n
	default:
		s.waiters.Remove(elem)
	}
	// A waiter leaving the head may let the next ones in.
	l.grant(s)
	l.drop(key, s)
	l.mu.Unlock()
	if errors.Is(err, ErrOverShare) {
		l.rejections.Inc()
	}
	return 0, err
}

// Release gives back n slots of key taken by Acquire.
func (l *Limiter) Release(key string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.keys[key]
	if !ok || n <= 0 {
		return
	}
	s.used -= n
	if s.used < 0 {
		panic("fairshare: Release of slots that were not acquired")
	}
	l.grant(s)
	l.drop(key, s)
}

// grant gives slots to the waiters at the head of s's queue while they
// fit. l.mu is held.
func (l *Limiter) grant(s *slots) {
	for e := s.waiters.Front(); e != nil; e = s.waiters.Front() {
		w := e.Value.(*waiter)
		if s.used+w.n > l.share {
			return
		}
		s.used += w.n
		s.waiters.Remove(e)
		close(w.ready)
	}
}

// drop forgets key when it holds nothing and nobody waits. l.mu is held.
func (l *Limiter) drop(key string, s *slots) {
	if s.used == 0 && s.waiters.Len() == 0 && l.keys[key] == s {
		delete(l.keys, key)
	}
}

// InFlight is how many slots of key are held now.
func (l *Limiter) InFlight(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.keys[key]; ok {
		return s.used
	}
	return 0
}
