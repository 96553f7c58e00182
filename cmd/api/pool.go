package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/pglisten"
	"github.com/repolock/repolock/internal/tenants"
)

// poolFlags are serve's database pool and token cache settings
// (docs/operations.md: sizing the pool).
type poolFlags struct {
	maxOpen     int
	maxIdle     int
	maxLifetime time.Duration
	maxIdleTime time.Duration

	cacheSize      int
	cacheTTL       time.Duration
	cacheListenTTL time.Duration
	cacheListen    bool
}

func (p *poolFlags) register(fs *flagSet) {
	fs.IntVar(&p.maxOpen, "db-max-open-conns", fs.envInt("DB_MAX_OPEN_CONNS", database.DefaultMaxOpenConns),
		"most connections this process opens to Postgres; replicas x (this + 1, the process's one LISTEN session) must fit max_connections [DB_MAX_OPEN_CONNS]")
	fs.IntVar(&p.maxIdle, "db-max-idle-conns", fs.envInt("DB_MAX_IDLE_CONNS", 0),
		"connections kept open while idle; 0 means the same as --db-max-open-conns (lower values reopen Postgres sessions under load) [DB_MAX_IDLE_CONNS]")
	fs.DurationVar(&p.maxLifetime, "db-conn-max-lifetime", fs.envDuration("DB_CONN_MAX_LIFETIME", 30*time.Minute),
		"close connections older than this; 0 means the default, 30m [DB_CONN_MAX_LIFETIME]")
	fs.DurationVar(&p.maxIdleTime, "db-conn-max-idle-time", fs.envDuration("DB_CONN_MAX_IDLE_TIME", 5*time.Minute),
		"close connections idle for longer than this; 0 means the default, 5m [DB_CONN_MAX_IDLE_TIME]")
	fs.IntVar(&p.cacheSize, "token-cache-size", fs.envInt("TOKEN_CACHE_SIZE", tenants.DefaultCacheSize),
		"tokens cached in process (token hash -> tenant); 0 is off (no cache): every request asks the database [TOKEN_CACHE_SIZE]")
	fs.DurationVar(&p.cacheTTL, "token-cache-ttl", fs.envDuration("TOKEN_CACHE_TTL", tenants.DefaultCacheTTL),
		"how long a cached token is trusted while the cache is not listening for revocations (the LISTEN session is down or off): the bound on revocation delay then; 0 means the default [TOKEN_CACHE_TTL]")
	fs.DurationVar(&p.cacheListenTTL, "token-cache-listen-ttl", fs.envDuration("TOKEN_CACHE_LISTEN_TTL", tenants.DefaultCacheListenTTL),
		"how long a cached token is trusted while revocations arrive by notification (the LISTEN session is up); at least --token-cache-ttl; 0 means the default [TOKEN_CACHE_LISTEN_TTL]")
	fs.BoolVar(&p.cacheListen, "token-cache-listen", fs.envBool("TOKEN_CACHE_LISTEN", true),
		"the token cache subscribes to the process's LISTEN session for token revocations and tenant deletions; false: revocations take up to --token-cache-ttl (e.g. behind a transaction-pooling PgBouncer without MIGRATE_DATABASE_URL) [TOKEN_CACHE_LISTEN]")
}

// config checks the flags and returns the pool configuration.
func (p *poolFlags) config() (database.PoolConfig, error) {
	switch {
	case p.maxOpen < 1:
		return database.PoolConfig{}, fmt.Errorf("--db-max-open-conns must be at least 1")
	case p.maxIdle < 0 || p.maxIdle > p.maxOpen:
		return database.PoolConfig{}, fmt.Errorf("--db-max-idle-conns must be 0..--db-max-open-conns (%d)", p.maxOpen)
	case p.maxLifetime < 0 || p.maxIdleTime < 0:
		return database.PoolConfig{}, fmt.Errorf("--db-conn-max-lifetime and --db-conn-max-idle-time must not be negative")
	case p.cacheSize < 0 || p.cacheTTL < 0 || p.cacheListenTTL < 0:
		return database.PoolConfig{}, fmt.Errorf("--token-cache-size, --token-cache-ttl and --token-cache-listen-ttl must not be negative")
	}
	return database.PoolConfig{MaxOpenConns: p.maxOpen, MaxIdleConns: p.maxIdle, ConnMaxLifetime: p.maxLifetime, ConnMaxIdleTime: p.maxIdleTime}, nil
}

// tokenCacheConfig is the token cache's configuration: Size 0 is off.
type tokenCacheConfig struct {
	Size      int
	TTL       time.Duration
	ListenTTL time.Duration
	// Listen: the cache subscribes to the process's LISTEN session.
	Listen bool
}

func (p *poolFlags) tokenCache() tokenCacheConfig {
	return tokenCacheConfig{Size: p.cacheSize, TTL: p.cacheTTL, ListenTTL: p.cacheListenTTL, Listen: p.cacheListen}
}

// newTokenCache returns the token cache, or nil when it is off (Size 0).
// With Listen, it subscribes to listener's session; otherwise entries live
// for TTL.
func newTokenCache(cfg tokenCacheConfig, listener *pglisten.Listener, logger *slog.Logger) *tenants.Cache {
	if cfg.Size == 0 {
		logger.Info("token cache disabled (TOKEN_CACHE_SIZE=0): every request authenticates against the database")
		return nil
	}
	c := tenants.NewCache(tenants.CacheConfig{Size: cfg.Size, TTL: cfg.TTL, ListenTTL: cfg.ListenTTL, Logger: logger})
	if cfg.Listen && listener != nil {
		listener.Subscribe(tenants.NotifyChannel, pglisten.Subscriber{Notify: c.Invalidate, State: c.SetListening})
	} else {
		logger.Info("token cache: not listening (TOKEN_CACHE_LISTEN=false); revocations take effect within the cache TTL", "ttl", cfg.TTL.String())
	}
	return c
}

// url returns the database URL of the flags or the environment.
func (c *commonFlags) url() (string, error) {
	if c.databaseURL == "" {
		c.databaseURL = c.env.getenv("DATABASE_URL")
	}
	if c.databaseURL == "" {
		return "", fmt.Errorf("no database: set DATABASE_URL or --database-url (make run and make test find or start one with scripts/pg-ensure.sh)")
	}
	return c.databaseURL, nil
}

// readiness is serve's startup state: not ready until the database
// answered and the migrations on start ran.
type readiness struct {
	mu  sync.Mutex
	err error
}

func (r *readiness) set(err error) {
	r.mu.Lock()
	r.err = err
	r.mu.Unlock()
}

func (r *readiness) get() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Startup backoff: the first retry after 100ms, doubling up to 5s.
const (
	startupMinBackoff = 100 * time.Millisecond
	startupMaxBackoff = 5 * time.Second
)

// waitForDatabase pings until the database answers (or ctx ends),
// retrying with capped exponential backoff; each failure is logged.
func waitForDatabase(ctx context.Context, db *database.DB, logger *slog.Logger, ready *readiness) error {
	delay := startupMinBackoff
	for attempt := 1; ; attempt++ {
		err := db.Ping(ctx, 2*time.Second)
		if err == nil {
			if attempt > 1 {
				logger.Info("database reachable", "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ready.set(errors.New("the database has not answered yet"))
		logger.Warn("database unreachable; retrying", "error", err.Error(), "attempt", attempt, "retry_in", delay.String())
		if err := database.SleepContext(ctx, delay); err != nil {
			return err
		}
		delay = min(delay*2, startupMaxBackoff)
	}
}

// startup brings serve to ready: it waits for the database, runs the
// migrations on start, loads what the service needs from the database
// (load: the configured normalizer aliases) — retrying while the database
// is unreachable; any other error is fatal. migrate, when not nil, applies
// the migrations (through MIGRATE_DATABASE_URL when it is set). The LISTEN
// session is not its concern: run starts it at once, and it connects when
// the database answers.
func startup(ctx context.Context, db *database.DB, logger *slog.Logger, migrate func(context.Context) error, load func(context.Context) error, ready *readiness) error {
	for {
		if err := waitForDatabase(ctx, db, logger, ready); err != nil {
			return err
		}
		err := prepare(ctx, migrate, load, ready)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Lost the database meanwhile: wait for it again. Anything else
		// (a dirty or newer schema, an invalid alias set) needs an operator.
		if !database.IsConnectionError(err) && db.Ping(ctx, 2*time.Second) == nil {
			return err
		}
		logger.Warn("startup interrupted by a database outage; retrying", "error", err.Error())
	}
	ready.set(nil)
	logger.Info("ready")
	return nil
}

// prepare is startup's work once the database answers: the migrations on
// start, then load.
func prepare(ctx context.Context, migrate, load func(context.Context) error, ready *readiness) error {
	if migrate != nil {
		ready.set(errors.New("applying migrations"))
		if err := migrate(ctx); err != nil {
			return err
		}
	}
	if load != nil {
		ready.set(errors.New("loading the normalizer aliases"))
		if err := load(ctx); err != nil {
			return err
		}
	}
	return nil
}
