// Package authguard throttles failed authentications with the admin token
// or any bearer token: per client address and over the whole process.
//
// The two budgets do different jobs:
//
//   - An address that has spent its own budget of failures is refused
//     (429) every attempt, the correct token included, until the budget
//     refills: otherwise a guess that hits would still be told apart from
//     the misses, and the throttle would not slow guessing at all. Only
//     that address's own failures spend it.
//   - The global budget is spent by the failures of every address; when it
//     is empty a failed attempt answers 429 instead of 401 (and the caller
//     skips any further lookup), but a correct token is verified first and
//     always passes: a flood of wrong tokens from other addresses never
//     locks the operator out.
//
// The HTTP API and the console share one Guard (cmd/api builds it), so an
// address has one budget on both.
package authguard

import (
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of serve: an address may fail PerAddressBurst times at once,
// then once every 1/PerAddressRate seconds; the process
// GlobalBurst times at once, then GlobalRate times a second.
const (
	DefaultPerAddressRate  rate.Limit = 1.0 / 6 // 10 a minute
	DefaultPerAddressBurst            = 10
	DefaultGlobalRate      rate.Limit = 10
	DefaultGlobalBurst                = 100
	// DefaultMaxAddresses bounds the addresses tracked at once; beyond
	// it, new addresses share one budget (see Guard.bucket).
	DefaultMaxAddresses = 100_000
)

// Config sets the budgets. Every field is required (Defaults gives serve's).
type Config struct {
	PerAddressRate  rate.Limit
	PerAddressBurst int
	GlobalRate      rate.Limit
	GlobalBurst     int
	MaxAddresses    int
}

// Defaults is serve's configuration.
func Defaults() Config {
	return Config{PerAddressRate: DefaultPerAddressRate, PerAddressBurst: DefaultPerAddressBurst,
		GlobalRate: DefaultGlobalRate, GlobalBurst: DefaultGlobalBurst, MaxAddresses: DefaultMaxAddresses}
}

// Guard holds the budgets. It is safe for concurrent use.
type Guard struct {
	cfg    Config
	global *rate.Limiter

	failures, refused atomic.Uint64

	mu        sync.Mutex
	addrs     map[string]*rate.Limiter
	overflow  *rate.Limiter // shared by addresses beyond MaxAddresses
	lastSweep time.Time
}

// New returns a Guard; it panics on a budget that is not positive (a wiring
// error).
func New(cfg Config) *Guard {
	if cfg.PerAddressRate <= 0 || cfg.PerAddressBurst <= 0 || cfg.GlobalRate <= 0 || cfg.GlobalBurst <= 0 || cfg.MaxAddresses <= 0 {
		panic("authguard.New: every budget must be positive")
	}
	return &Guard{
		cfg:      cfg,
		global:   rate.NewLimiter(cfg.GlobalRate, cfg.GlobalBurst),
		addrs:    map[string]*rate.Limiter{},
		overflow: rate.NewLimiter(cfg.PerAddressRate, cfg.PerAddressBurst),
	}
}

// Blocked reports whether addr has spent its budget: then every attempt of
// it is refused, and retryAfter says when one failure's worth is back.
// It is asked before the credential is checked.
func (g *Guard) Blocked(addr string, now time.Time) (retryAfter time.Duration, blocked bool) {
	g.mu.Lock()
	b, ok := g.addrs[addr]
	if !ok && len(g.addrs) >= g.cfg.MaxAddresses {
		b, ok = g.overflow, true
	}
	g.mu.Unlock()
	if !ok {
		return 0, false
	}
	if tokens := b.TokensAt(now); tokens < 1 {
		g.refused.Add(1)
		return waitFor(1-tokens, g.cfg.PerAddressRate), true
	}
	return 0, false
}

// Stats are the counts since the Guard was built: Failures recorded by
// Failed, and Refused answers (429), by Blocked or by Failed beyond a
// budget. cmd/api exports them as repolock_auth_failures_total and
// repolock_auth_refused_total.
type Stats struct{ Failures, Refused uint64 }

// Stats returns the counts so far.
func (g *Guard) Stats() Stats { return Stats{Failures: g.failures.Load(), Refused: g.refused.Load()} }

// Failed records a failed authentication of addr. It returns 0 when the
// failure is within both budgets (answer 401), else how long the caller
// must wait (answer 429 with Retry-After).
func (g *Guard) Failed(addr string, now time.Time) time.Duration {
	b := g.bucket(addr, now)
	var wait time.Duration
	if !b.AllowN(now, 1) {
		wait = waitFor(1-b.TokensAt(now), g.cfg.PerAddressRate)
	}
	if !g.global.AllowN(now, 1) {
		wait = max(wait, waitFor(1-g.global.TokensAt(now), g.cfg.GlobalRate))
	}
	g.failures.Add(1)
	if wait > 0 {
		g.refused.Add(1)
	}
	return wait
}

// bucket returns addr's budget, created full. Beyond MaxAddresses tracked
// addresses, after dropping the full ones, new addresses share one
// budget: a flood of fresh addresses cannot grow the map without bound.
func (g *Guard) bucket(addr string, now time.Time) *rate.Limiter {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b, ok := g.addrs[addr]; ok {
		return b
	}
	if len(g.addrs) >= g.cfg.MaxAddresses || now.Sub(g.lastSweep) >= time.Minute {
		g.lastSweep = now
		for a, b := range g.addrs {
			if b.TokensAt(now) >= float64(g.cfg.PerAddressBurst) {
				delete(g.addrs, a)
			}
		}
	}
	if len(g.addrs) >= g.cfg.MaxAddresses {
		return g.overflow
	}
	b := rate.NewLimiter(g.cfg.PerAddressRate, g.cfg.PerAddressBurst)
	g.addrs[addr] = b
	return b
}

// waitFor is the time to refill missing tokens at r, at least a second
// (Retry-After counts whole seconds).
func waitFor(missing float64, r rate.Limit) time.Duration {
	d := time.Duration(math.Ceil(missing/float64(r))) * time.Second
	return max(d, time.Second)
}

// RetryAfter is d in whole seconds, rounded up, for a Retry-After header.
func RetryAfter(d time.Duration) int {
	return max(int(math.Ceil(d.Seconds())), 1)
}

// ClientAddr is the address a request's failures are counted against: the
// peer's IP (an IPv6 peer by its /64, which one host usually holds whole),
// or, when trustForwardedFor, the last address of X-Forwarded-For, the one
// the trusted proxy in front appended (earlier ones are the client's to
// choose). Only enable trustForwardedFor behind a proxy that always sets
// the header.
func ClientAddr(r *http.Request, trustForwardedFor bool) string {
	host := r.RemoteAddr
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if trustForwardedFor {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			parts := strings.Split(xff[len(xff)-1], ",")
			if last := strings.TrimSpace(parts[len(parts)-1]); last != "" {
				host = last
			}
		}
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}
