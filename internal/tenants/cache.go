package tenants

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// NotifyChannel is the Postgres channel on which every change to a token or
// a tenant is announced, with the tenant id as payload (triggers of
// migration 000010, in the changing transaction).
const NotifyChannel = "repolock_tenant_tokens"

// Cache defaults.
const (
	DefaultCacheSize      = 10000
	DefaultCacheTTL       = 30 * time.Second
	DefaultCacheListenTTL = 10 * time.Minute
)

// CacheConfig configures a Cache.
type CacheConfig struct {
	// Size bounds the number of cached tokens (default DefaultCacheSize).
	Size int
	// TTL is how long a cached token is trusted without asking the
	// database while the cache is not listening (default DefaultCacheTTL):
	// the bound on revocation delay when notifications cannot arrive (no
	// LISTEN session, it is down, or behind a transaction-pooling
	// PgBouncer without the direct URL).
	TTL time.Duration
	// ListenTTL is how long a cached token is trusted while the cache
	// listens (SetListening(true)): revocations then arrive by
	// notification, and the TTL only bounds what a notification lost
	// without the session noticing could leave stale (default
	// DefaultCacheListenTTL; never less than TTL).
	ListenTTL time.Duration
	// Logger receives the cache's state changes.
	Logger *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Cache authenticates hot tokens without a database round trip: an
// in-process map of token hash -> tenant, bounded in size, whose entries
// expire and are dropped as soon as a notification says their tenant's
// tokens or the tenant changed.
//
// The cache does not listen itself: the process's LISTEN session
// (internal/pglisten, wired by cmd/api) calls Invalidate with the payload
// of each notification on NotifyChannel and SetListening with its state.
// While it listens, a revocation or a tenant deletion takes effect on
// every process within the notification's delivery time (milliseconds)
// and entries live for ListenTTL; otherwise they live for TTL. Every
// change of state flushes the cache (notifications may have been lost
// while the session was away), and so does SetListening(true) when the
// cache was already listening (a resynchronization).
//
// Only successful authentications are cached; unknown and revoked tokens
// always ask the database.
type Cache struct {
	cfg CacheConfig

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cacheEntry
	// gen counts invalidations: a lookup that started before one does not
	// store its (possibly stale) result.
	gen       uint64
	listening bool
}

type cacheEntry struct {
	tenant Tenant
	at     time.Time // when it was read from the database
}

// NewCache returns a cache, not listening.
func NewCache(cfg CacheConfig) *Cache {
	if cfg.Size <= 0 {
		cfg.Size = DefaultCacheSize
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultCacheTTL
	}
	if cfg.ListenTTL <= 0 {
		cfg.ListenTTL = DefaultCacheListenTTL
	}
	cfg.ListenTTL = max(cfg.ListenTTL, cfg.TTL)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Cache{cfg: cfg, entries: map[[sha256.Size]byte]cacheEntry{}}
}

// SetListening is the state of the LISTEN session on NotifyChannel
// (pglisten.Subscriber.State): it flushes the cache, and entries then
// live for ListenTTL (up) or TTL (down).
func (c *Cache) SetListening(up bool) {
	c.mu.Lock()
	changed := c.listening != up
	c.listening = up
	c.flushLocked()
	c.mu.Unlock()
	if !changed {
		return
	}
	if up {
		c.cfg.Logger.Info("token cache: listening for token changes", "channel", NotifyChannel, "ttl", c.cfg.ListenTTL.String())
	} else {
		c.cfg.Logger.Warn("token cache: not listening; revocations take effect within the cache TTL until the session is back", "ttl", c.cfg.TTL.String())
	}
}

// Listening reports whether the cache counts on notifications.
func (c *Cache) Listening() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.listening
}

// ttlLocked is the current lifetime of an entry.
func (c *Cache) ttlLocked() time.Duration {
	if c.listening {
		return c.cfg.ListenTTL
	}
	return c.cfg.TTL
}

// Flush drops every entry. A nil Cache has none.
func (c *Cache) Flush() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushLocked()
}

// flushLocked drops every entry and counts an invalidation (c.mu held).
func (c *Cache) flushLocked() {
	c.gen++
	clear(c.entries)
}

// Invalidate drops the entries of one tenant (by id).
func (c *Cache) Invalidate(tenantID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for k, e := range c.entries {
		if e.tenant.ID == tenantID {
			delete(c.entries, k)
		}
	}
}

// Len is the number of cached tokens.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Authenticate authenticates token through the cache, asking db on a
// miss (Service.Authenticate calls it).
func (c *Cache) Authenticate(ctx context.Context, db *database.DB, token string) (Tenant, error) {
	if !strings.HasPrefix(token, TokenPrefix) || len(token) > 200 {
		return Tenant{}, repolock.Errorf(repolock.EUnauthenticated, "invalid or revoked token")
	}
	key := sha256.Sum256([]byte(token))
	now := c.cfg.Now()
	c.mu.Lock()
	e, ok := c.entries[key]
	gen := c.gen
	fresh := ok && now.Sub(e.at) < c.ttlLocked()
	c.mu.Unlock()
	if fresh {
		return e.tenant, nil
	}
	u, err := authenticate(ctx, db, token)
	if err != nil {
		return Tenant{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen { // invalidated meanwhile: do not store what may be stale
		return u, nil
	}
	if len(c.entries) >= c.cfg.Size {
		c.evictLocked(now)
	}
	c.entries[key] = cacheEntry{tenant: u, at: now}
	return u, nil
}

// evictLocked makes room: expired entries first, else an arbitrary tenth.
func (c *Cache) evictLocked(now time.Time) {
	ttl := c.ttlLocked()
	for k, e := range c.entries {
		if now.Sub(e.at) >= ttl {
			delete(c.entries, k)
		}
	}
	n := c.cfg.Size / 10
	for k := range c.entries {
		if len(c.entries) < c.cfg.Size && n <= 0 {
			return
		}
		delete(c.entries, k)
		n--
	}
}
