package tenants

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// NotifyChannel is the Postgres channel on which every change to a token or
// a tenant is announced, with the tenant id as payload (triggers of
// migration 000010, in the changing transaction).
const NotifyChannel = "repolock_tenant_tokens"

// Cache defaults.
const (
	DefaultCacheSize = 10000
	DefaultCacheTTL  = 30 * time.Second
)

// CacheConfig configures a Cache.
type CacheConfig struct {
	// Size bounds the number of cached tokens (default DefaultCacheSize).
	Size int
	// TTL is how long a cached token is trusted without asking the
	// database (default DefaultCacheTTL): the backstop for notifications
	// that are lost, or never sent (LISTEN unavailable, e.g. behind a
	// transaction-pooling PgBouncer). Revocation then takes up to TTL.
	TTL time.Duration
	// ListenURL is the connection string of the dedicated LISTEN
	// connection. Empty: no listener, entries live for TTL.
	ListenURL string
	// Logger receives the listener's state changes.
	Logger *slog.Logger
	// Also is another subscriber of the listener's connection, so that one
	// session serves both (the watch's notifications, internal/watch). Nil:
	// none.
	Also *Subscriber
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Subscriber listens on the cache's LISTEN connection too: the listener
// also listens on Channel, calls Notify at each notification on it (and
// after each reconnection, since notifications may have been lost while
// it was away), and State with whether the connection is up (true once
// LISTEN on Channel took effect, false when the connection is lost).
type Subscriber struct {
	Channel string
	Notify  func()
	State   func(connected bool)
}

// Cache authenticates hot tokens without a database round trip: an
// in-process map of token hash -> tenant, bounded in size, whose entries
// expire after TTL and are dropped as soon as a notification says their
// tenant's tokens or the tenant changed. With the listener connected a
// revocation or a tenant deletion takes effect on every process within the
// notification's delivery time (milliseconds); each (re)connection of the
// listener flushes the cache, since notifications may have been lost
// while it was away.
//
// Only successful authentications are cached; unknown and revoked tokens
// always ask the database.
type Cache struct {
	cfg CacheConfig

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cacheEntry
	// gen counts invalidations: a lookup that started before one does not
	// store its (possibly stale) result.
	gen uint64

	listener      *pq.Listener
	connected     chan struct{} // closed at the listener's first connection
	connectedOnce sync.Once
	done          chan struct{}
	wg            sync.WaitGroup
}

type cacheEntry struct {
	tenant  Tenant
	expires time.Time
}

// NewCache returns a cache. Call Start to connect its listener, Close to
// stop it.
func NewCache(cfg CacheConfig) *Cache {
	if cfg.Size <= 0 {
		cfg.Size = DefaultCacheSize
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultCacheTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Cache{cfg: cfg, entries: map[[sha256.Size]byte]cacheEntry{}, done: make(chan struct{}), connected: make(chan struct{})}
}

// Start starts the LISTEN connection (when ListenURL is set) in the
// background. It never fails: while the listener cannot connect, it keeps
// retrying with capped backoff and the cache falls back to its TTL; every
// state change is logged.
func (c *Cache) Start() {
	if c.cfg.ListenURL == "" {
		c.cfg.Logger.Info("token cache: no listener; revocations take effect within the cache TTL", "ttl", c.cfg.TTL.String())
		return
	}
	c.listener = pq.NewListener(c.cfg.ListenURL, 50*time.Millisecond, 5*time.Second, c.event)
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		// Listen blocks until the first connection is up (or Close).
		err := c.listener.Listen(NotifyChannel)
		if err == nil && c.cfg.Also != nil {
			if err = c.listener.Listen(c.cfg.Also.Channel); err == nil {
				c.cfg.Also.State(true)
				c.cfg.Also.Notify()
			}
		}
		if err == nil {
			c.Flush() // anything cached before LISTEN took effect
			c.connectedOnce.Do(func() { close(c.connected) })
			c.cfg.Logger.Info("token cache: listening for token changes", "channel", NotifyChannel, "ttl", c.cfg.TTL.String())
			return
		}
		select {
		case <-c.done:
		default:
			c.cfg.Logger.Warn("token cache: LISTEN failed; revocations take effect within the cache TTL",
				"error", err.Error(), "ttl", c.cfg.TTL.String())
		}
	}()
	go func() {
		defer c.wg.Done()
		c.run()
	}()
}

// event is the listener's state callback.
func (c *Cache) event(ev pq.ListenerEventType, err error) {
	switch ev {
	case pq.ListenerEventConnected, pq.ListenerEventReconnected:
		c.Flush()
		if c.cfg.Also != nil && ev == pq.ListenerEventReconnected { // its LISTEN was re-sent
			c.cfg.Also.State(true)
		}
		c.cfg.Logger.Info("token cache: listener connected", "event", ev.String())
	case pq.ListenerEventDisconnected:
		c.Flush()
		if c.cfg.Also != nil {
			c.cfg.Also.State(false)
		}
		c.cfg.Logger.Warn("token cache: listener disconnected; revocations take effect within the cache TTL until it reconnects",
			"error", errString(err), "ttl", c.cfg.TTL.String())
	case pq.ListenerEventConnectionAttemptFailed:
		c.cfg.Logger.Warn("token cache: listener cannot connect; retrying", "error", errString(err))
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (c *Cache) run() {
	// Ping now and then: a connection that died silently is only noticed
	// when used.
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return
		case n, ok := <-c.listener.Notify:
			if !ok { // the listener was closed
				return
			}
			if n == nil { // after a reconnection: anything may have been missed
				c.Flush()
				if c.cfg.Also != nil {
					c.cfg.Also.Notify()
				}
				continue
			}
			if c.cfg.Also != nil && n.Channel == c.cfg.Also.Channel {
				c.cfg.Also.Notify()
				continue
			}
			c.Invalidate(n.Extra)
		case <-tick.C:
			go func() { _ = c.listener.Ping() }()
		}
	}
}

// Connected is closed once LISTEN first took effect (the signal tests
// wait on).
func (c *Cache) Connected() <-chan struct{} { return c.connected }

// Close stops the listener. A nil Cache has none.
func (c *Cache) Close() {
	if c == nil {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	close(c.done)
	if c.listener != nil {
		_ = c.listener.Close()
	}
	c.wg.Wait()
}

// Flush drops every entry. A nil Cache has none.
func (c *Cache) Flush() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
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
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
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
	c.entries[key] = cacheEntry{tenant: u, expires: now.Add(c.cfg.TTL)}
	return u, nil
}

// evictLocked makes room: expired entries first, else an arbitrary tenth.
func (c *Cache) evictLocked(now time.Time) {
	for k, e := range c.entries {
		if !now.Before(e.expires) {
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
