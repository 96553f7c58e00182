// Package database is the one place that talks to database/sql: it opens the
// pool, runs transactions with serialization retries, applies the embedded
// migrations and maps Postgres errors onto the domain vocabulary.
package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // registers the "postgres" driver
)

// Querier is what query functions take: a *DB, a *sqlx.DB or a *sqlx.Tx.
// Functions written against it run alone or inside a caller's transaction.
type Querier interface {
	sqlx.ExtContext
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
}

// DB is the connection pool.
type DB struct {
	*sqlx.DB
	// retry controls Transact's retries of serialization failures and
	// deadlocks.
	retry RetryPolicy
	// stmts caches prepared statements by query text (stmt.go).
	stmts sync.Map
	// unprepared turns the cache off (behind a transaction-pooling
	// PgBouncer, pooler.go).
	unprepared bool
	// cfg is the pool configuration with defaults applied; maxIdle is
	// restored after a flush (DiscardIdle).
	cfg PoolConfig
	// flushes counts DiscardIdle calls (tests, metrics).
	flushes atomic.Int64
	// batchers holds the pool's Batchers by name (batch.go), made with
	// batchStallAfter when set.
	batchers        sync.Map
	batchStallAfter time.Duration
}

// PoolConfig sets the pool's limits. Zero values select the defaults.
//
// Size MaxOpenConns against Postgres max_connections across every process
// that connects (see docs/operations.md): replicas x MaxOpenConns, plus
// the listener connection of each replica, plus the CLI and operators,
// must stay below max_connections minus superuser_reserved_connections.
type PoolConfig struct {
	// MaxOpenConns caps the connections of the pool (default 20).
	MaxOpenConns int
	// MaxIdleConns is how many connections the pool keeps open when idle
	// (default: MaxOpenConns). Below MaxOpenConns, bursts of more
	// concurrent requests than idle connections close and reopen Postgres
	// sessions continuously (a fork, authentication and re-preparing every
	// statement each time).
	MaxIdleConns int
	// ConnMaxLifetime closes connections older than this (default 30m).
	ConnMaxLifetime time.Duration
	// ConnMaxIdleTime closes connections idle for longer (default 5m).
	ConnMaxIdleTime time.Duration
}

// DefaultMaxOpenConns is the pool size when none is configured.
const DefaultMaxOpenConns = 20

// WithDefaults returns cfg with every zero field set to its default.
func (cfg PoolConfig) WithDefaults() PoolConfig {
	if cfg.MaxOpenConns <= 0 {
		cfg.MaxOpenConns = DefaultMaxOpenConns
	}
	if cfg.MaxIdleConns <= 0 || cfg.MaxIdleConns > cfg.MaxOpenConns {
		cfg.MaxIdleConns = cfg.MaxOpenConns
	}
	if cfg.ConnMaxLifetime == 0 {
		cfg.ConnMaxLifetime = 30 * time.Minute
	}
	if cfg.ConnMaxIdleTime == 0 {
		cfg.ConnMaxIdleTime = 5 * time.Minute
	}
	return cfg
}

// New returns a pool on url (a postgres:// URL or a lib/pq key=value
// string) without connecting: the first connection is opened by the first
// query. `api serve` starts with it while the database may be down.
func New(url string, cfg PoolConfig) (*DB, error) {
	if url == "" {
		return nil, fmt.Errorf("database: no database URL given (set DATABASE_URL)")
	}
	dsn, err := ConnString(url)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	sdb, err := sqlx.Open("postgres", dsn)
	if err != nil {
		return nil, fmt.Errorf("database: open: %w", err)
	}
	cfg = cfg.WithDefaults()
	sdb.SetMaxOpenConns(cfg.MaxOpenConns)
	sdb.SetMaxIdleConns(cfg.MaxIdleConns)
	sdb.SetConnMaxLifetime(cfg.ConnMaxLifetime)
	sdb.SetConnMaxIdleTime(cfg.ConnMaxIdleTime)
	return &DB{DB: sdb, retry: DefaultRetryPolicy, cfg: cfg}, nil
}

// Open is New followed by a ping (10 s timeout): for commands that need the
// database right away.
func Open(ctx context.Context, url string, cfg PoolConfig) (*DB, error) {
	db, err := New(url, cfg)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("database: ping: %w", err)
	}
	return db, nil
}

// Config returns the pool configuration in effect (defaults applied).
func (db *DB) Config() PoolConfig { return db.cfg }

// DiscardIdle closes every idle connection of the pool. Called when a
// connection turns out to be broken: after a database restart or a network
// cut every idle connection is broken too, and handing them out one by one
// would fail one request each. Connections in use are discarded by
// database/sql when they report driver.ErrBadConn.
func (db *DB) DiscardIdle() {
	db.flushes.Add(1)
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(db.cfg.MaxIdleConns)
}

// Discards reports how often DiscardIdle ran.
func (db *DB) Discards() int64 { return db.flushes.Load() }

// SetRetryPolicy replaces the policy Transact uses.
func (db *DB) SetRetryPolicy(p RetryPolicy) { db.retry = p }

// Ping checks the database with the given timeout.
func (db *DB) Ping(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := db.PingContext(ctx)
	if IsConnectionError(err) {
		db.DiscardIdle()
	}
	return err
}

// Tx is the transaction type Transact passes to its function.
type Tx = *sqlx.Tx

// IsNoRows reports whether err is sql.ErrNoRows.
func IsNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
